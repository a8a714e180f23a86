"""Facts about the released models: keypoint names, flip pairs, skeleton, segmentation classes, palette.

The JSON ships inside the package (copied from the project's shared data) so that nothing at run time
depends on files outside the installed package.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

NUM_KEYPOINTS = 308
NUM_SEG_CLASSES = 29


@lru_cache(maxsize=1)
def raw_metadata() -> dict:
    """The shipped metadata JSON, parsed once."""
    text = resources.files("sapiens2_stream.models").joinpath("data/sapiens2_metadata.json").read_text()
    return json.loads(text)


@dataclass(frozen=True)
class PoseMetadata:
    """The 308-keypoint layout of the released pose models (not COCO order: wrists are 62 and 41)."""

    names: tuple[str, ...]
    flip_indices: tuple[int, ...]
    flip_pairs: tuple[tuple[int, int], ...]
    colors: tuple[tuple[int, int, int], ...]
    skeleton: tuple[tuple[int, int], ...]
    skeleton_colors: tuple[tuple[int, int, int], ...]
    coco17: tuple[int, ...]
    groups: dict[str, tuple[int, ...]]


@dataclass(frozen=True)
class SegMetadata:
    """The 29 body-part classes, their palette and the left/right classes a horizontal flip swaps."""

    names: tuple[str, ...]
    palette: tuple[tuple[int, int, int], ...]
    flip_swap_pairs: tuple[tuple[int, int], ...]

    @property
    def flip_indices(self) -> tuple[int, ...]:
        """Channel permutation that turns a mirrored prediction back into an unmirrored one."""
        order = list(range(len(self.names)))
        for a, b in self.flip_swap_pairs:
            order[a], order[b] = b, a
        return tuple(order)


COCO17_NAMES = (
    "nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder",
    "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip",
    "left_knee", "right_knee", "left_ankle", "right_ankle",
)  # fmt: skip


@lru_cache(maxsize=1)
def pose_metadata() -> PoseMetadata:
    d = raw_metadata()
    links = [tuple(s["link"]) for s in d["skeleton"]]
    return PoseMetadata(
        names=tuple(d["names"]),
        flip_indices=tuple(d["flip_indices"]),
        flip_pairs=tuple(tuple(p) for p in d["flip_pairs"]),
        colors=tuple(tuple(c) for c in d["keypoint_colors_rgb"]),
        skeleton=tuple(links),
        skeleton_colors=tuple(tuple(s["color_rgb"]) for s in d["skeleton"]),
        coco17=tuple(d["coco17_from_308"][name] for name in COCO17_NAMES),
        groups={k.split("(")[0]: tuple(v) for k, v in d["groups"].items()},
    )


@lru_cache(maxsize=1)
def keypoint_index() -> dict[str, int]:
    """Each of the 308 keypoints' position, by name."""
    return {name: i for i, name in enumerate(pose_metadata().names)}


@lru_cache(maxsize=1)
def seg_metadata() -> SegMetadata:
    d = raw_metadata()["seg29"]
    classes = sorted(d["classes"], key=lambda c: c["id"])
    return SegMetadata(
        names=tuple(c["name"] for c in classes),
        palette=tuple(tuple(c["color_rgb"]) for c in classes),
        flip_swap_pairs=tuple(tuple(p) for p in d["hflip_swap_label_pairs"]),
    )
