"""A COCO keypoints file in the making (`keypoints.json`): images, each person's box and keypoints, one category.
Both datasets this project makes write it so (`label`'s teacher-labelled frames, the rendered people of
`humans.datasets`), and `finetune` reads it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


class CocoKeypoints:
    """Images and their people, written at the end in one go (`write`: complete or not there)."""

    def __init__(self, names: list[str]) -> None:
        """`names`: the keypoints each person lists, in order."""
        self.names = list(names)
        self.images: list[dict] = []
        self.annotations: list[dict] = []

    def image(self, file_name: str, width: int, height: int) -> int:
        """A picture (`file_name` relative to the dataset's folder); returns its id."""
        self.images.append({"id": len(self.images) + 1, "file_name": file_name, "width": width, "height": height})
        return len(self.images)

    def person(self, image_id: int, box, keypoints: np.ndarray, **extra) -> None:
        """A person of image `image_id`: `box` [x, y, w, h], `keypoints` [K, 3] (x, y, visibility over `names`),
        and fields of its own (`track_id`)."""
        box = [round(float(v), 2) for v in box]
        flat = [round(float(v), 2) if i % 3 < 2 else int(v) for i, v in enumerate(np.asarray(keypoints).ravel())]
        self.annotations.append({
            "id": len(self.annotations) + 1, "image_id": image_id, "category_id": 1, "iscrowd": 0, "bbox": box,
            "area": round(box[2] * box[3], 1), "num_keypoints": int((np.asarray(keypoints)[:, 2] > 0).sum()),
            "keypoints": flat, **extra,
        })  # fmt: skip

    def write(self, path: Path) -> None:
        categories = [{"id": 1, "name": "person", "supercategory": "person", "keypoints": self.names, "skeleton": []}]
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps({"images": self.images, "annotations": self.annotations,
                                       "categories": categories}))  # fmt: skip
        partial.replace(path)
