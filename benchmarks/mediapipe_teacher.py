"""MediaPipe 0.10.14 as a teacher, run by `benchmarks.real_footage` in a virtual environment of its own (its
protobuf pin breaks onnx in ours): `VENV/bin/python benchmarks/mediapipe_teacher.py VIDEO BOXES.json OUT.jsonl`.

BOXES.json: {"frame index": [[x, y, w, h], ...]}. Each box is cropped at 1.25x (BlazePose finds 94% of the people
of such crops against 80% at 1x), shown to BlazePose Full (static, with its segmentation) and written as one line
per box: frame, box, the 33 landmarks in frame pixels with their visibility (null where no pose was found) and
the mask's share of the crop. Only numpy, OpenCV and mediapipe are imported: nothing of sapiens2_stream."""

from __future__ import annotations

import json
import sys
import time

import cv2
import mediapipe as mp
import numpy as np

SCALE = 1.25


def crop(frame: np.ndarray, box: list[float]) -> tuple[np.ndarray, int, int]:
    x, y, w, h = box
    cx, cy, half_w, half_h = x + w / 2, y + h / 2, SCALE * w / 2, SCALE * h / 2
    x0, y0 = max(int(cx - half_w), 0), max(int(cy - half_h), 0)
    x1, y1 = min(int(cx + half_w), frame.shape[1]), min(int(cy + half_h), frame.shape[0])
    return frame[y0:y1, x0:x1], x0, y0


def main() -> None:
    video, boxes_path, out_path = sys.argv[1:4]
    boxes = {int(k): v for k, v in json.loads(open(boxes_path).read()).items()}
    capture = cv2.VideoCapture(video)
    started, crops = time.perf_counter(), 0
    with mp.solutions.pose.Pose(static_image_mode=True, model_complexity=1, enable_segmentation=True) as pose, \
            open(out_path, "w") as out:  # fmt: skip
        index = 0
        while True:
            ok, bgr = capture.read()
            if not ok:
                break
            for box in boxes.get(index, []):
                picture, x0, y0 = crop(bgr, box)
                found = pose.process(cv2.cvtColor(picture, cv2.COLOR_BGR2RGB))
                crops += 1
                line = {"frame": index, "box": box, "landmarks": None, "mask_share": None}
                if found.pose_landmarks:
                    h, w = picture.shape[:2]
                    line["landmarks"] = [[x0 + p.x * w, y0 + p.y * h, p.visibility]
                                         for p in found.pose_landmarks.landmark]  # fmt: skip
                    if found.segmentation_mask is not None:
                        line["mask_share"] = float((found.segmentation_mask > 0.5).mean())
                out.write(json.dumps(line) + "\n")
            index += 1
    seconds = time.perf_counter() - started
    print(json.dumps({"crops": crops, "seconds": round(seconds, 1), "ms_per_crop": round(1000 * seconds / max(crops, 1),
                                                                                           1)}))  # fmt: skip


if __name__ == "__main__":
    main()
