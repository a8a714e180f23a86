"""What the pipeline gives for each frame: the people in it (track id, box, keypoints) and the dense outputs that
ran, as numpy arrays. Every stage after `infer` and every sink and observer reads these."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..io.sources import Frame


@dataclass
class Person:
    track_id: int
    box: np.ndarray  # COCO xywh, frame pixels
    score: float
    keypoints: np.ndarray | None = None  # [K, 2] raw decoded
    keypoint_scores: np.ndarray | None = None  # [K]
    smoothed: np.ndarray | None = None  # [K, 2] after the online smoother
    keypoints_3d: np.ndarray | None = None  # [K, 3] metres in the camera frame (x right, y down, z forward)
    keypoints_3d_confidence: np.ndarray | None = None  # [K] in [0, 1]; halved where the joint was hidden
    fields: dict = field(default_factory=dict)  # what built-in stages add about this person, each under its own
    # name, which is its key in the records (JSONL, MQTT, `Result.to_dict()`): `angles` from the angles stage
    extra: dict = field(default_factory=dict)  # what users' stages add about this person (records: `extra`)

    @property
    def angles(self) -> dict | None:
        """The angles stage's: {"2d", "3d", "confidence", "why", "side"}; None where it did not run."""
        return self.fields.get("angles")


@dataclass
class FrameResult:
    frame: Frame
    people: list[Person]
    source: str = ""  # the source's name (several sources), set when the result is delivered
    ended_tracks: list[int] = field(default_factory=list)
    seg: np.ndarray | None = None  # [H, W] uint8 class labels
    seg_probabilities: np.ndarray | None = None  # [C, h, w] float32 at temporal.seg_width, for the temporal filter
    alpha: np.ndarray | None = None  # [H, W] float32 in [0, 1]
    foreground: np.ndarray | None = None  # [H, W, 3] float32 premultiplied RGB in [0, 1]
    normals: np.ndarray | None = None  # [H, W, 3] float32 unit vectors
    pointmap: np.ndarray | None = None  # [H, W, 3] float32
    flip: dict[str, bool] = field(default_factory=dict)
    events: list[dict] = field(default_factory=list)  # what the events stage found in this frame (`events:`)
    event_rules: object = None  # the source's EventRules (zones and lines to draw, with their counts)
    world_from_camera: np.ndarray | None = None  # [4, 4] the threed stage's world frame so far (None: not yet)
    pictures: dict = field(default_factory=dict)  # pictures made once per result, shared by the outputs (read-only)
    replayed: bool = False  # drawn again by --resume from its recorded result (the videos lacked it)
    extra: dict = field(default_factory=dict)  # what users' stages add to the frame (JSONL and MQTT: `extra`)
