"""`sapiens2-stream label RUN_FOLDER|VIDEO... --output DATA`: pseudo-labels from a teacher pipeline, in the formats
`finetune` reads, so that a big model's knowledge of a site's own footage can be distilled into a smaller one.

A video is first run through the teacher pipeline (its detector, tracker and pose model) into `DATA/teacher/<name>/`,
a run folder like any other; a run folder given as input is used as it is (its results.jsonl and its source file).
From each run, the frames with people are read again from the source and shown to the teacher (`teacher.py`: its
pose, part and matte models, plain and mirrored), and only what the teacher is sure of is kept (`sureness.py`).

Frames are split into training and validation by time, per source: the last `val_share` of its time span is for
validation and the `gap_s` before it for neither, so neighbouring (nearly identical) frames never sit on both
sides and the validation score says how the student does on moments it never saw.

DATA/
  train/ keypoints.json (COCO, the kept keypoints v=2, the rest unlabelled), images/ (the frames, JPEG),
         labels/ (part ids, 255 where the teacher's two sides disagree), alpha/ (the matte, 8-bit PNG)
  val/   the same
  teacher/<name>/ the teacher's runs of the videos given
  label.json  the teacher, the rules, and what was kept
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import cv2
import numpy as np

from ..errors import Sapiens2StreamError
from ..humans.body import KEYPOINTS as BODY_KEYPOINTS
from ..io.coco import CocoKeypoints
from ..io.jsonl import source_folders
from ..io.records import RecordedFrame, read_frames
from ..models.metadata import NUM_KEYPOINTS, keypoint_index, pose_metadata
from ..runtime.pipeline_config import read_pipeline
from ..runtime.pose_run import pose_run
from .ctrl_c import ctrl_c
from .sureness import Sureness, TrackSteadiness, sure_keypoints
from .teacher import TEACHING_TASKS, Taught, Teacher

BATCH_FRAMES = 8  # frames shown to the teacher at once (each with its mirror image)
KEYPOINT_SETS = ("all", "body")  # all 308, or the body's (COCO-17 and the six foot points)


@dataclass
class LabelOptions:
    inputs: list[str]
    output: str
    pipeline: str | None = None  # the teacher: a pipeline YAML (its models, detector, tracker); default: the runs'
    # own models, or for videos the toy models
    rules: Sureness = field(default_factory=Sureness)
    keypoints: str = "all"  # all | body
    every: int = 1  # label every Nth frame (neighbouring frames are nearly the same picture)
    val_share: float = 0.2  # the last share of each source's time span held out for validation
    gap_s: float = 1.0  # seconds before the validation part that neither side gets
    device: str = "auto"
    progress: bool = True


@dataclass
class TeacherRun:
    """One source's results.jsonl and where its frames come from."""

    name: str
    uri: str
    records: list[RecordedFrame]
    models: dict[str, str]


def split_by_time(records: list[RecordedFrame], val_share: float, gap_s: float) -> dict[int, str]:
    """Frame index -> "train" or "val" for the records with people: the last `val_share` of the time span is
    validation, the `gap_s` seconds before it neither."""
    times = [r.pts for r in records if r.people]
    if not times:
        return {}
    start, end = min(times), max(times)
    boundary = end - val_share * (end - start) if val_share > 0 else np.inf
    out = {}
    for r in records:
        if r.people:
            if r.pts >= boundary:
                out[r.frame] = "val"
            elif r.pts < boundary - gap_s:
                out[r.frame] = "train"
    return out


def run_records(folder: Path) -> list[TeacherRun]:
    """The sources of a run folder: its results.jsonl (or its sources' folders' ones), each with the source its
    summary.json names (else the records' own source) and the models that made them."""
    runs = []
    for source in source_folders(folder):
        records = read_frames(source / "results.jsonl")
        if not records:
            continue
        summary = source / "summary.json"
        uri = json.loads(summary.read_text()).get("source") if summary.exists() else None
        runs.append(TeacherRun(source.name, uri or records[0].source, records, dict(records[0].models)))
    return runs


def teacher_data(pipeline: str | None) -> dict:
    """The teacher pipeline as YAML-shaped data: the file's, else the toy models with a detector that works here
    (YOLO where its weights are, else the whole frame)."""
    if pipeline is not None:
        return read_pipeline(pipeline)
    from ..detect.options import DetectorConfig
    from ..models.toy import toy_model

    weights = DetectorConfig.weights
    detector = {"type": "yolo", "weights": weights} if Path(weights).exists() else {"type": "full_frame"}
    return {"models": {task: {"source": str(toy_model(task))} for task in TEACHING_TASKS}, "detector": detector}


def model_sources(data: dict) -> dict[str, str]:
    """{task: source} of a teacher pipeline's teaching models."""
    models = data.get("models") or {}
    return {t: (m["source"] if isinstance(m, dict) else m) for t, m in models.items()
            if t in TEACHING_TASKS and m}  # fmt: skip


class DatasetWriter:
    """One side of the split: frames, part labels and mattes as files, the COCO annotations at the end."""

    def __init__(self, folder: Path, names: list[str]) -> None:
        self.folder = folder
        self.coco = CocoKeypoints(names)
        for sub in ("images", "labels", "alpha"):
            (folder / sub).mkdir(parents=True, exist_ok=True)

    def add(self, stem: str, picture: np.ndarray, people: list[tuple[np.ndarray, np.ndarray]], taught: Taught) -> None:
        """A frame and its kept people: (box, keypoints [K, 3] over `names`)."""
        cv2.imwrite(str(self.folder / "images" / f"{stem}.jpg"), picture[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, 95])
        if taught.parts is not None:
            cv2.imwrite(str(self.folder / "labels" / f"{stem}.png"), taught.parts)
        if taught.alpha is not None:
            cv2.imwrite(str(self.folder / "alpha" / f"{stem}.png"), np.round(taught.alpha * 255).astype(np.uint8))
        height, width = picture.shape[:2]
        image_id = self.coco.image(f"images/{stem}.jpg", width, height)
        for box, points in people:
            self.coco.person(image_id, box, points)

    def close(self) -> None:
        self.coco.write(self.folder / "keypoints.json")


def wanted_keypoints(which: str) -> tuple[list[str], list[int]]:
    """The keypoint names a dataset lists and their indices among the 308."""
    if which not in KEYPOINT_SETS:
        raise Sapiens2StreamError(f"--keypoints {which}: choose one of {', '.join(KEYPOINT_SETS)}")
    names = list(pose_metadata().names) if which == "all" else list(BODY_KEYPOINTS)
    index = keypoint_index()
    return names, [index[n] for n in names]


def frames_of(uri: str, wanted: set[int]):
    """The wanted frames of a source (index, RGB), read again as the run read them."""
    from ..io.options import SourceConfig
    from ..io.sources import Source

    source = Source(SourceConfig(uri=uri))
    if source.live:
        raise Sapiens2StreamError(f"{uri}: a live source cannot be read again; label a recording of it")
    last = max(wanted)
    for frame in source.frames():
        if frame.index in wanted:
            yield frame.index, frame.rgb
        if frame.index >= last:
            return


class Counts:
    """What was seen and kept, for label.json and the closing line."""

    def __init__(self) -> None:
        self.frames = {"train": 0, "val": 0}
        self.people_seen = 0
        self.people_kept = {"train": 0, "val": 0}
        self.keypoints_kept = 0
        self.keypoints_wanted = 0


def label(opts: LabelOptions) -> dict:
    """Write the dataset; returns label.json's contents. Raises Sapiens2StreamError for bad input before anything
    is written, and when the teacher was sure of no one (what was written stays)."""
    if opts.every < 1 or not 0 <= opts.val_share < 1 or opts.gap_s < 0:
        raise Sapiens2StreamError("--every must be at least 1, --val-share in [0, 1), --gap-s 0 or more")
    names, listed = wanted_keypoints(opts.keypoints)
    out = Path(opts.output)
    if (out / "label.json").exists() or (out / "train").exists():
        raise Sapiens2StreamError(f"{out}: already holds a dataset; choose another --output or delete it")
    data = teacher_data(opts.pipeline) if opts.pipeline or any(not is_run(i) for i in opts.inputs) else None
    if data is not None and "pose" not in model_sources(data):
        raise Sapiens2StreamError(f"{opts.pipeline}: the teacher needs a pose model (models.pose)")
    for item in opts.inputs:
        if not is_run(item) and "://" not in item and not Path(item).exists():
            raise Sapiens2StreamError(f"{item}: no such video or run folder")
    runs: list[TeacherRun] = []
    for item in opts.inputs:
        folder, given_run = Path(item), is_run(item)
        if not given_run:
            folder = pose_run(item, data, out / "teacher" / Path(item.rstrip("/")).stem, opts.device, opts.progress,
                              origin="the teacher pipeline")  # fmt: skip
        found = run_records(folder)
        if not found:
            raise Sapiens2StreamError(f"{folder}: its results.jsonl holds no frames")
        for run in found:
            if opts.pipeline or not given_run:  # the teacher pipeline's models, not only the pose its run needed
                run.models = model_sources(data)
        runs += found
    writers = {side: DatasetWriter(out / side, names) for side in ("train", "val")}
    counts = Counts()
    teachers: dict[str, Teacher] = {}
    with ctrl_c():  # Ctrl-C: what was labelled stays (each side's keypoints.json is written); twice: at once
        try:
            for run in runs:
                key = json.dumps(run.models, sort_keys=True)
                if key not in teachers:
                    teachers[key] = Teacher(run.models, opts.device)
                label_run(run, teachers[key], opts, listed, writers, counts)
        finally:
            for teacher in teachers.values():
                teacher.close()
            for writer in writers.values():
                writer.close()
    summary = {
        "teacher": {run.name: run.models for run in runs},
        "sources": {run.name: run.uri for run in runs},
        "rules": asdict(opts.rules), "keypoints": opts.keypoints, "every": opts.every,
        "val_share": opts.val_share, "gap_s": opts.gap_s,
        "frames": counts.frames, "people_seen": counts.people_seen, "people_kept": counts.people_kept,
        "keypoints_kept_share": round(counts.keypoints_kept / max(counts.keypoints_wanted, 1), 4),
    }  # fmt: skip
    (out / "label.json").write_text(json.dumps(summary, indent=2) + "\n")
    if not sum(counts.people_kept.values()):
        raise Sapiens2StreamError(f"the teacher was sure of no one ({counts.people_seen} people seen); loosen "
                                  "--min-score, --max-flip-gap or --max-jump")  # fmt: skip
    return summary


def is_run(item: str) -> bool:
    folder = Path(item)
    return folder.is_dir() and bool(source_folders(folder))


def label_run(run: TeacherRun, teacher: Teacher, opts: LabelOptions, listed: list[int],
              writers: dict[str, DatasetWriter], counts: Counts) -> None:  # fmt: skip
    """One source: its frames with people, every `every`th, shown to the teacher, the sure people written (the
    `listed` keypoints, in that order)."""
    from tqdm import tqdm

    mask = np.zeros(NUM_KEYPOINTS, bool)
    mask[listed] = True
    sides = split_by_time(run.records, opts.val_share, opts.gap_s)
    by_frame = {r.frame: r for r in run.records}
    wanted = {f for f in sides if f % opts.every == 0}
    if not wanted:
        return
    steady = TrackSteadiness(run.records)
    bar = tqdm(total=len(wanted), unit="frame", desc=f"label {run.name}", disable=not opts.progress, file=sys.stderr)
    batch: list[tuple[int, np.ndarray]] = []

    def flush() -> None:
        people = [by_frame[f].people for f, _ in batch]
        boxes = [np.array([p.box for p in ps], np.float32).reshape(-1, 4) for ps in people]
        for (frame, picture), persons, taught in zip(batch, people, teacher.teach([p for _, p in batch], boxes),
                                                     strict=True):  # fmt: skip
            kept = []
            for i, person in enumerate(persons):
                jump = steady.jump(person.track_id, frame)
                sure = sure_keypoints(taught.scores[i], taught.flip_gap[i], jump, person.box, mask, opts.rules)
                counts.people_seen += 1
                counts.keypoints_wanted += int(mask.sum())
                if sure.sum() < opts.rules.min_keypoints:
                    continue
                counts.keypoints_kept += int(sure.sum())
                points = np.zeros((NUM_KEYPOINTS, 3), np.float32)
                points[sure, :2], points[sure, 2] = taught.keypoints[i][sure], 2
                kept.append((person.box.astype(np.float32), points[listed]))
            if kept:
                side = sides[frame]
                writers[side].add(f"{run.name}_{frame:06d}", picture, kept, taught)
                counts.frames[side] += 1
                counts.people_kept[side] += len(kept)
        bar.update(len(batch))
        batch.clear()

    for frame, picture in frames_of(run.uri, wanted):
        batch.append((frame, picture))
        if len(batch) == BATCH_FRAMES:
            flush()
    if batch:
        flush()
    bar.close()
