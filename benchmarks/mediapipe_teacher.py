"""MediaPipe 0.10.14 as a teacher, run by `benchmarks.real_footage` in a virtual environment of its own (its
protobuf pin breaks onnx in ours), with OpenCV 4 (whose HOG people detector OpenCV 5 no longer has):

    VENV/bin/python benchmarks/mediapipe_teacher.py boxes VIDEO BOXES.json
    VENV/bin/python benchmarks/mediapipe_teacher.py pose VIDEO BOXES.json OUT.jsonl
    VENV/bin/python benchmarks/mediapipe_teacher.py whole VIDEO OUT.jsonl

`boxes`: per frame the people HOG finds, on the frame enlarged 1.5x (people in vtest.avi are 40-120 px tall, HOG's
window 128), as {"frame index": [[x, y, w, h], ...]}. `pose`: each box cropped at 1.25x (BlazePose finds 94% of
the people of such crops against 80% at 1x), shown to BlazePose Full (static) and to the selfie segmenter, one line
per box: frame, box, the 33 landmarks in frame pixels with their visibility (null where no pose was found), and
the IoU of BlazePose's own person mask with the selfie segmenter's (how far the two teachers agree on the
person). `whole` (a video of one person filling the frame, as `benchmarks.real_mocap` uses): BlazePose Full in its
video mode (tracking from frame to frame) on each whole frame, one line per frame: frame and the 33 landmarks in
frame pixels with their visibility (null where no pose was found). Only numpy, OpenCV and mediapipe are
imported: nothing of sapiens2_stream."""

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


def frames(video: str):
    capture = cv2.VideoCapture(video)
    index = 0
    while True:
        ok, bgr = capture.read()
        if not ok:
            return
        yield index, bgr
        index += 1


def hog_boxes(video: str, out_path: str) -> dict:
    hog = cv2.HOGDescriptor()
    hog.setSVMDetector(cv2.HOGDescriptor_getDefaultPeopleDetector())
    boxes = {}
    for index, bgr in frames(video):
        big = cv2.resize(bgr, None, fx=1.5, fy=1.5)
        found, weights = hog.detectMultiScale(big, winStride=(8, 8), padding=(8, 8), scale=1.05)
        boxes[index] = [[round(float(v) / 1.5, 1) for v in box]
                        for box, w in zip(found, np.ravel(weights), strict=True) if w > 0.5]  # fmt: skip
    with open(out_path, "w") as out:
        json.dump(boxes, out)
    return {"frames": len(boxes), "boxes": sum(map(len, boxes.values()))}


def iou(a: np.ndarray, b: np.ndarray) -> float:
    union = (a | b).sum()
    return float((a & b).sum() / union) if union else 0.0


def poses(video: str, boxes_path: str, out_path: str) -> dict:
    boxes = {int(k): v for k, v in json.loads(open(boxes_path).read()).items()}
    crops = 0
    with mp.solutions.pose.Pose(static_image_mode=True, model_complexity=1, enable_segmentation=True) as pose, \
            mp.solutions.selfie_segmentation.SelfieSegmentation(model_selection=0) as selfie, \
            open(out_path, "w") as out:  # fmt: skip
        for index, bgr in frames(video):
            for box in boxes.get(index, []):
                picture, x0, y0 = crop(bgr, box)
                rgb = cv2.cvtColor(picture, cv2.COLOR_BGR2RGB)
                found = pose.process(rgb)
                crops += 1
                line = {"frame": index, "box": box, "landmarks": None, "masks_iou": None}
                if found.pose_landmarks:
                    h, w = picture.shape[:2]
                    line["landmarks"] = [[x0 + p.x * w, y0 + p.y * h, p.visibility]
                                         for p in found.pose_landmarks.landmark]  # fmt: skip
                    if found.segmentation_mask is not None:
                        person = selfie.process(rgb).segmentation_mask > 0.5
                        line["masks_iou"] = iou(found.segmentation_mask > 0.5, person)
                out.write(json.dumps(line) + "\n")
    return {"crops": crops}


def whole_frames(video: str, out_path: str) -> dict:
    count = 0
    with mp.solutions.pose.Pose(static_image_mode=False, model_complexity=1) as pose, open(out_path, "w") as out:
        for index, bgr in frames(video):
            found = pose.process(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
            h, w = bgr.shape[:2]
            landmarks = None
            if found.pose_landmarks:
                landmarks = [[p.x * w, p.y * h, p.visibility] for p in found.pose_landmarks.landmark]
            out.write(json.dumps({"frame": index, "landmarks": landmarks}) + "\n")
            count += 1
    return {"frames": count}


def main() -> None:
    what, video, *paths = sys.argv[1:]
    started = time.perf_counter()
    run = {"boxes": hog_boxes, "pose": poses, "whole": whole_frames}[what]
    done = run(video, *paths)
    seconds = time.perf_counter() - started
    count = done.get("crops") or done.get("frames")
    print(json.dumps({**done, "seconds": round(seconds, 1), "ms_each": round(1000 * seconds / max(count, 1), 1)}))


if __name__ == "__main__":
    main()
