"""Real people, measured: `python -m benchmarks.real_footage [--steps 1500]` (a benchmark, not the CI suite).

The toy pose model has only ever seen drawn figures. Here it meets real pedestrians: OpenCV's `vtest.avi` (Debian's
`opencv-doc` package; 768x576, 795 frames of PETS 2009 S2.L1, copyright University of Reading, research use with
acknowledgement), labelled by a real teacher, MediaPipe 0.10.14's BlazePose Full (Apache-2.0), which runs offline
in a virtual environment of its own (its protobuf pin breaks onnx in ours) as a subprocess
(`benchmarks/mediapipe_teacher.py`). People are found by OpenCV's HOG people detector (licence-clean), each box
cropped at 1.25x for the teacher.

The toy model is then fine-tuned (`finetune pose --from` the toy model) on frames 0-539 (validation 555-599) and
scored on frames 600-794 against the teacher, before and after: PCK@0.1 and @0.05 of the box, per keypoint (the 19
BlazePose points that are the 308's own: face, arms, legs, heels; a keypoint counts where the teacher sees it with
visibility >= 0.5 inside its crop).

What it fetches (and says so): `opencv-doc` with `apt-get download` when `vtest.avi` is not installed, mediapipe and
its few needs with `pip` into `~/.cache/sapiens2-stream/mediapipe-0.10.14/` (about 440 MB). Everything it makes from
the video (boxes, the teacher's labels, the frames, overlays with the footage) stays in
`~/.cache/sapiens2-stream/real_footage/`: nothing of vtest.avi is committed. The figure for the docs draws the
skeletons alone, without the footage.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np

CACHE = Path.home() / ".cache" / "sapiens2-stream"
VTEST = Path("/usr/share/doc/opencv-doc/examples/data/vtest.avi")
MEDIAPIPE = "mediapipe==0.10.14"
# the slim recipe: jax, jaxlib and sounddevice serve only mediapipe's genai converter and audio tasks
# (OpenCV 4: its HOG people detector is gone from OpenCV 5)
MEDIAPIPE_NEEDS = ["absl-py", "attrs", "flatbuffers", "protobuf>=4.25.3,<5", "numpy", "opencv-python-headless<5",
                   "matplotlib"]  # fmt: skip
# BlazePose's 33 landmarks that are points of the 308 by the same name (the others are face or hand points of
# other definitions): BlazePose index -> the 308's name
SAME_POINTS = {
    0: "nose", 2: "left_eye", 5: "right_eye", 7: "left_ear", 8: "right_ear", 11: "left_shoulder",
    12: "right_shoulder", 13: "left_elbow", 14: "right_elbow", 15: "left_wrist", 16: "right_wrist", 23: "left_hip",
    24: "right_hip", 25: "left_knee", 26: "right_knee", 27: "left_ankle", 28: "right_ankle", 29: "left_heel",
    30: "right_heel",
}  # fmt: skip
SEEN = 0.5  # BlazePose visibility at which a landmark counts as seen
TRAIN, VAL, TEST = range(0, 540), range(555, 600), range(600, 795)


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def vtest_video() -> Path:
    """vtest.avi from the installed opencv-doc, else from the package fetched with `apt-get download`."""
    if VTEST.exists():
        return VTEST
    folder = CACHE / "opencv-doc"
    found = folder / VTEST.relative_to("/")
    if not found.exists():
        say(f"fetching vtest.avi: apt-get download opencv-doc into {folder}")
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(["apt-get", "download", "opencv-doc"], cwd=folder, check=True)
        deb = next(folder.glob("opencv-doc_*.deb"))
        subprocess.run(["dpkg", "-x", str(deb), str(folder)], check=True)
    return found


def mediapipe_python() -> Path:
    """The Python of a virtual environment holding mediapipe 0.10.14, made with pip on first use."""
    venv = CACHE / "mediapipe-0.10.14"
    python = venv / "bin" / "python"
    if not python.exists():
        say(f"installing {MEDIAPIPE} (the teacher) with pip into {venv}, about 440 MB")
        subprocess.run(["python3", "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", MEDIAPIPE], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *MEDIAPIPE_NEEDS], check=True)
    return python


def in_teacher_venv(python: Path, *args: str) -> dict:
    """`mediapipe_teacher.py` in the teacher's environment; its timing line."""
    script = Path(__file__).with_name("mediapipe_teacher.py")
    done = subprocess.run([str(python), str(script), *args], check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def cached(path: Path, make) -> dict:
    """`make(partial path)` once: its output renamed to `path`, its timing kept beside it."""
    timing = path.with_suffix(".timing.json")
    if not path.exists():
        partial = path.with_name(path.name + ".partial")
        timing.write_text(json.dumps(make(partial)))
        partial.replace(path)
    return json.loads(timing.read_text())


def to_308_names(landmarks: list | None, box: list, width: int, height: int) -> np.ndarray:
    """BlazePose's landmarks as [19, 3] (x, y, 2 where seen inside the 1.25x crop, else 0) in SAME_POINTS' order."""
    out = np.zeros((len(SAME_POINTS), 3), np.float32)
    if landmarks is None:
        return out
    x, y, w, h = box
    lo = np.array([max(x + w / 2 - 0.625 * w, 0), max(y + h / 2 - 0.625 * h, 0)])
    hi = np.array([min(x + w / 2 + 0.625 * w, width - 1), min(y + h / 2 + 0.625 * h, height - 1)])
    for row, index in enumerate(SAME_POINTS):
        px, py, visibility = landmarks[index]
        if visibility >= SEEN and (lo <= (px, py)).all() and ((px, py) <= hi).all():
            out[row] = (px, py, 2)
    return out


def write_sets(video: Path, labels: list[dict], folder: Path) -> dict[str, Path]:
    """COCO keypoints files (the 19 names) with the frames beside them, for training, validation and the test."""
    (folder / "images").mkdir(parents=True, exist_ok=True)
    width, height = 768, 576
    by_frame: dict[int, list] = {}
    for line in labels:
        points = to_308_names(line["landmarks"], line["box"], width, height)
        if (points[:, 2] > 0).sum() >= 4:
            by_frame.setdefault(line["frame"], []).append((line["box"], points))
    capture, index = cv2.VideoCapture(str(video)), 0
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        if index in by_frame and not (folder / "images" / f"{index:04d}.jpg").exists():
            cv2.imwrite(str(folder / "images" / f"{index:04d}.jpg"), frame, [cv2.IMWRITE_JPEG_QUALITY, 95])
        index += 1
    files = {}
    for name, frames in (("train", TRAIN), ("val", VAL), ("test", TEST)):
        images, annotations = [], []
        for f in frames:
            if f not in by_frame:
                continue
            images.append({"id": f + 1, "file_name": f"images/{f:04d}.jpg", "width": width, "height": height})
            for box, points in by_frame[f]:
                annotations.append({"id": len(annotations) + 1, "image_id": f + 1, "category_id": 1, "iscrowd": 0,
                                    "bbox": box, "area": box[2] * box[3], "keypoints": points.ravel().tolist(),
                                    "num_keypoints": int((points[:, 2] > 0).sum())})  # fmt: skip
        coco = {"images": images, "annotations": annotations,
                "categories": [{"id": 1, "name": "person", "keypoints": list(SAME_POINTS.values())}]}  # fmt: skip
        files[name] = folder / f"{name}.json"
        files[name].write_text(json.dumps(coco))
    return files


def scored(model_folder: str, test_file: Path) -> tuple[dict, np.ndarray, object]:
    """The model against the teacher on the test frames: PCK@0.1 / @0.05 of the box (HOG's: loose) and @0.1 of the
    teacher's keypoints' own extent (tight), per keypoint, and left/right swaps; its keypoints."""
    from sapiens2_stream.models import load_model
    from sapiens2_stream.models.metadata import keypoint_index, pose_metadata
    from sapiens2_stream.train.data import read_pose_set
    from sapiens2_stream.train.evaluate import predict_keypoints
    from sapiens2_stream.train.metrics import left_right_swaps, pck

    model = load_model(model_folder, device="cpu")
    data = read_pose_set(test_file)
    predicted, _ = predict_keypoints(model, data, tuple(model.config.image_size), flip=True)
    ids = [keypoint_index()[n] for n in SAME_POINTS.values()]
    pred, truth = predicted[:, ids], data.keypoints[:, ids]
    tight = np.array([[0, 0, *np.ptp(t[t[:, 2] > 0, :2], axis=0)] for t in truth], np.float32)
    per_point = {name: round(pck(pred[:, [i]], truth[:, [i]], data.boxes, 0.1), 3)
                 for i, name in enumerate(SAME_POINTS.values())}  # fmt: skip
    return ({"pck@0.1": round(pck(pred, truth, data.boxes, 0.1), 3),
             "pck@0.05": round(pck(pred, truth, data.boxes, 0.05), 3),
             "pck@0.1_tight": round(pck(pred, truth, tight, 0.1), 3),
             "lr_swaps": round(left_right_swaps(predicted, data.keypoints, data.boxes, pose_metadata().flip_pairs), 3),
             "per_keypoint": per_point}, pred, data)  # fmt: skip


COLOURS = ((255, 255, 255), (60, 60, 230), (80, 220, 80))  # BGR: the teacher, the toy model before, after


def skeleton_lines() -> list[tuple[int, int]]:
    """The skeleton's lines between SAME_POINTS (indices into their order)."""
    from sapiens2_stream.models.metadata import pose_metadata

    names = pose_metadata().names
    index = {n: i for i, n in enumerate(SAME_POINTS.values())}
    return [(index[names[a]], index[names[b]]) for a, b in pose_metadata().skeleton
            if names[a] in index and names[b] in index]  # fmt: skip


def draw_person(canvas: np.ndarray, at, teacher: np.ndarray, before: np.ndarray, after: np.ndarray) -> None:
    """The three skeletons of one person where the teacher sees both ends of a line; `at` maps frame px to the
    canvas."""
    seen = teacher[:, 2] > 0
    for points, colour in zip((teacher, before, after), COLOURS, strict=True):
        for a, b in skeleton_lines():
            if seen[a] and seen[b]:
                cv2.line(canvas, at(points[a]), at(points[b]), colour, 2, cv2.LINE_AA)


def pictures(data, teacher: np.ndarray, before: np.ndarray, after: np.ndarray, figure: str | None, folder: Path,
             count: int = 8) -> None:  # fmt: skip
    """`count` test people spread over the test frames: the skeletons alone on grey (no pixel of the footage) for
    the docs, and over their frames (to look at here, not to publish) in `folder`."""
    picks = np.linspace(0, len(data) - 1, count).astype(int)
    tile_h, tile_w = 300, 160
    canvas = np.full((tile_h, tile_w * count, 3), 60, np.uint8)
    folder.mkdir(exist_ok=True)
    for n, i in enumerate(picks):
        x, y, w, h = data.boxes[i]
        scale = min((tile_w - 20) / w, (tile_h - 20) / h)

        def at(p, n=n, x=x, y=y, scale=scale):
            return int(n * tile_w + 10 + (p[0] - x) * scale), int(10 + (p[1] - y) * scale)

        cv2.rectangle(canvas, at((x, y)), at((x + w, y + h)), (110, 110, 110), 1)
        draw_person(canvas, at, teacher[i], before[i], after[i])
        frame = cv2.resize(np.ascontiguousarray(data.images[data.image_of[i]][..., ::-1]), None, fx=2, fy=2)
        draw_person(frame, lambda p: (int(2 * p[0]), int(2 * p[1])), teacher[i], before[i], after[i])
        cv2.imwrite(str(folder / f"person_{n}.jpg"), frame)
    if figure:
        cv2.imwrite(figure, canvas)


def median_iou(labels: list[dict]) -> float:
    """The median IoU of BlazePose's person mask with the selfie segmenter's, over the people found."""
    values = [line["masks_iou"] for line in labels if line["masks_iou"] is not None]
    return round(float(np.median(values)), 3) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--json", default="benchmarks/results/real_footage.json")
    parser.add_argument("--figure", help="the skeletons-only figure (the docs use docs/real_footage.png)")
    parser.add_argument("--keep-student", action="store_true", help="score the student an earlier run trained")
    args = parser.parse_args()
    from sapiens2_stream.models.toy import toy_model

    work = CACHE / "real_footage"
    work.mkdir(parents=True, exist_ok=True)
    video, python = vtest_video(), mediapipe_python()
    boxes_path, labels_path = work / "hog_boxes.json", work / "blazepose.jsonl"
    hog = cached(boxes_path, lambda out: in_teacher_venv(python, "boxes", str(video), str(out)))
    say(f"HOG: {hog['boxes']} boxes in {hog['frames']} frames, {hog['ms_each']:.0f} ms a frame")
    timing = cached(labels_path, lambda out: in_teacher_venv(python, "pose", str(video), str(boxes_path), str(out)))
    say(f"BlazePose: {timing['crops']} crops, {timing['ms_each']:.0f} ms each")
    labels = [json.loads(line) for line in labels_path.read_text().splitlines()]
    found = [line["landmarks"] is not None for line in labels]
    files = write_sets(video, labels, work / "data")
    before, before_kp, test = scored(str(toy_model("pose")), files["test"])
    start = time.perf_counter()
    student = work / "student"
    if not (args.keep_student and (student / "best").is_dir()):
        subprocess.run([sys.executable, "-m", "sapiens2_stream.cli", "finetune", "pose", "--data", str(files["train"]),
                        "--val", str(files["val"]), "--from", str(toy_model("pose")), "--output", str(student),
                        "--steps", str(args.steps), "--batch-size", "32", "--device", "cpu", "--no-progress"],
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        minutes = (time.perf_counter() - start) / 60
    else:  # the earlier run's training time
        minutes = json.loads(Path(args.json).read_text())["finetune_minutes"]
    after, after_kp, _ = scored(str(student / "best"), files["test"])
    people = {k: len(json.loads(v.read_text())["annotations"]) for k, v in files.items()}
    report = {
        "boxes": hog["boxes"], "hog_ms_per_frame": hog["ms_each"], "teacher_found": round(float(np.mean(found)), 3),
        "teacher_ms_per_crop": timing["ms_each"], "masks_iou_median": median_iou(labels), "people": people,
        "steps": args.steps,
        "finetune_minutes": round(minutes, 1), "before": before, "after": after,
    }  # fmt: skip
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k not in ("before", "after")}))
    for name in ("before", "after"):
        print(name, {k: v for k, v in report[name].items() if k != "per_keypoint"}, report[name]["per_keypoint"])
    from sapiens2_stream.models.metadata import keypoint_index

    teacher = test.keypoints[:, [keypoint_index()[n] for n in SAME_POINTS.values()]]
    pictures(test, teacher, before_kp, after_kp, args.figure, work / "overlays")
    say(f"the labelled frames, the student and overlays with the footage (not to be published) are in {work}")


if __name__ == "__main__":
    main()
