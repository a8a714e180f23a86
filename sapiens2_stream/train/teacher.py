"""The teacher of `label`: a pipeline's pose, part and matte models run on each frame and on its mirror image with
flip TTA off, so that what they say both ways can be compared. Keypoints are decoded from each side on their own:
the distance between the two is how unsure the teacher is of a point (a flip-consistent model puts a point it sees
clearly in the same place both ways); the label is their mean, as flip TTA would give. Part labels are kept where
the two sides agree, the matte is the mean of both.

The models are those of a pipeline (its `models.pose`, `models.seg`, `models.matting` sections: hub id, folder or
file), run by the pipeline's own engine, crops and decoders, so a label is what a run of that pipeline would say."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..io.sources import Frame
from ..models.metadata import pose_metadata, seg_metadata
from ..runtime.device import resolve_device, resolve_dtype
from ..runtime.engine import InferenceEngine
from ..runtime.options import ModelSection
from ..runtime.results import Person

TEACHING_TASKS = ("pose", "seg", "matting")


@dataclass
class Taught:
    """What the teacher says about one frame's people (in the order of their boxes) and its pixels."""

    keypoints: np.ndarray  # [P, 308, 2] px: the mean of the plain and the mirrored forward
    scores: np.ndarray  # [P, 308] the lower of the two sides' heatmap peaks
    flip_gap: np.ndarray  # [P, 308] px between the two sides' keypoints
    parts: np.ndarray | None  # [H, W] uint8 class ids, 255 where the two sides disagree (None: no seg model)
    alpha: np.ndarray | None  # [H, W] float32 0-1, the mean of both sides (None: no matting model)


def mirror_boxes(boxes: np.ndarray, width: int) -> np.ndarray:
    """COCO xywh boxes [N, 4] in the mirror image of a picture `width` pixels wide."""
    out = np.asarray(boxes, np.float32).reshape(-1, 4).copy()
    out[:, 0] = width - out[:, 0] - out[:, 2]
    return out


def unmirror_keypoints(keypoints: np.ndarray, width: int) -> np.ndarray:
    """Keypoints [..., 308, 2] decoded on a mirror image, back in the picture: x mirrored (pixel centres at whole
    numbers, as the crops and decoders place them) and left and right swapped."""
    out = np.asarray(keypoints)[..., list(pose_metadata().flip_indices), :].copy()
    out[..., 0] = width - 1 - out[..., 0]
    return out


def unmirror_parts(labels: np.ndarray) -> np.ndarray:
    """Part labels [H, W] of a mirror image, back in the picture: columns mirrored, sided classes swapped."""
    swap = np.asarray(seg_metadata().flip_indices, np.uint8)
    return swap[labels[:, ::-1]]


class Teacher:
    """A pipeline's teaching models, loaded once. `models`: {task: source} for any of pose, seg and matting (pose
    is needed: labels are about people)."""

    def __init__(self, models: dict[str, str], device: str = "auto", max_batch: int = 8) -> None:
        sections = {task: ModelSection(source=source, flip="off", max_batch=max_batch)
                    for task, source in models.items() if task in TEACHING_TASKS}  # fmt: skip
        torch_device = resolve_device(device)
        self.engine = InferenceEngine(sections, torch_device, resolve_dtype("auto", torch_device)[0])
        self.tasks = tuple(sections)

    def close(self) -> None:
        self.engine.executor.shutdown(wait=True)

    def teach(self, pictures: list[np.ndarray], boxes: list[np.ndarray]) -> list[Taught]:
        """Per picture (RGB uint8) and its people's boxes [P, 4] (COCO xywh), what the teacher says."""
        mirrored = [np.ascontiguousarray(p[:, ::-1]) for p in pictures]
        frames = [Frame(i, 0.0, 0.0, p) for i, p in enumerate([*pictures, *mirrored])]
        people = [[Person(0, box, 1.0) for box in np.asarray(b, np.float32).reshape(-1, 4)] for b in boxes]
        people += [
            [Person(0, box, 1.0) for box in mirror_boxes(b, p.shape[1])] for b, p in zip(boxes, pictures, strict=True)
        ]
        results = self.engine.executor.submit(self.engine.run, frames, people).result()
        taught = []
        order = list(pose_metadata().flip_indices)
        n = len(pictures)
        for plain, back, picture in zip(results[:n], results[n:], pictures, strict=True):
            width = picture.shape[1]
            a = np.array([p.keypoints for p in plain.people], np.float32).reshape(-1, 308, 2)
            b = unmirror_keypoints(np.array([p.keypoints for p in back.people], np.float32).reshape(-1, 308, 2),
                                   width)  # fmt: skip
            score_a = np.array([p.keypoint_scores for p in plain.people], np.float32).reshape(-1, 308)
            score_b = np.array([p.keypoint_scores for p in back.people], np.float32).reshape(-1, 308)[:, order]
            parts = None
            if plain.seg is not None:
                parts = plain.seg.copy()
                parts[parts != unmirror_parts(back.seg)] = 255
            alpha = None if plain.alpha is None else (plain.alpha + back.alpha[:, ::-1]) / 2
            taught.append(Taught((a + b) / 2, np.minimum(score_a, score_b), np.linalg.norm(a - b, axis=-1), parts,
                                 alpha))  # fmt: skip
        return taught
