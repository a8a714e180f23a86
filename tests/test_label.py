"""`label`: pseudo-labels from a teacher pipeline. On a rendered clip with the toy models as the teacher, the labels
it keeps are nearer the renders' truth than everything the teacher said, train and validation frames are apart in
time, the data is finetune's as it is (`finetune pose --data DATA`), and bad input is one line and exit 2."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest
import yaml

from sapiens2_stream.cli import main
from sapiens2_stream.humans.body import KEYPOINTS
from sapiens2_stream.humans.clips import crossing, mirrored, write_clip
from sapiens2_stream.io.records import recorded_frame
from sapiens2_stream.models.metadata import keypoint_index, pose_metadata, seg_metadata
from sapiens2_stream.models.toy import toy_model
from sapiens2_stream.train.data import read_dense_set, read_pose_set
from sapiens2_stream.train.label import split_by_time
from sapiens2_stream.train.metrics import pck
from sapiens2_stream.train.sureness import Sureness, TrackSteadiness, sure_keypoints
from sapiens2_stream.train.teacher import mirror_boxes, unmirror_keypoints, unmirror_parts

BODY = [keypoint_index()[n] for n in KEYPOINTS]
LOOSE = ["--min-score=-inf", "--max-flip-gap", "inf", "--max-jump", "inf", "--min-keypoints", "0"]


def cli(*args) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main([*map(str, args), "--no-progress"])
    return code, err.getvalue()


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    folder = tmp_path_factory.mktemp("label")
    truth = write_clip(str(folder / "cross.mp4"), crossing(), fps=15, max_frames=60)
    teacher = folder / "teacher.yaml"
    teacher.write_text(yaml.safe_dump({
        "detector": {"type": "file", "path": truth["path"]},
        "models": {t: {"source": str(toy_model(t))} for t in ("pose", "seg", "matting")},
        "runtime": {"device": "cpu"},
    }))  # fmt: skip
    return folder, truth, teacher


@pytest.fixture(scope="module")
def labelled(clip):
    folder, _, teacher = clip
    code, err = cli("label", folder / "cross.mp4", "--pipeline", teacher, "--output", folder / "sure",
                    "--keypoints", "body")  # fmt: skip
    assert code == 0, err
    # the same teacher run again, as a run folder, with every rule off: everything the teacher said
    code, err = cli("label", folder / "sure" / "teacher" / "cross", "--pipeline", teacher, "--output",
                    folder / "all", "--keypoints", "body", *LOOSE)  # fmt: skip
    assert code == 0, err
    return folder


def against_truth(data, truth) -> tuple[float, int]:
    """PCK@0.1 of a dataset's labelled keypoints against the renders' truth, and how many there are."""
    preds, truths, boxes = [], [], []
    for side in ("train", "val"):
        coco = json.loads((data / side / "keypoints.json").read_text())
        frames = {im["id"]: int(im["file_name"].rsplit("_", 1)[1].split(".")[0]) for im in coco["images"]}
        for a in coco["annotations"]:
            people = truth["frames"][frames[a["image_id"]]]["people"]
            t = min(people, key=lambda p: np.abs(np.subtract(p["box"], a["bbox"])).sum())
            preds.append(np.reshape(a["keypoints"], (-1, 3)))
            truths.append(np.asarray(t["keypoints"])[BODY])
            boxes.append(t["box"])
    pred, true = np.array(preds), np.array(truths, np.float32)
    both = (pred[..., 2] > 0) & (true[..., 2] > 0)
    return pck(pred, np.concatenate([true[..., :2], both[..., None]], -1), np.array(boxes), 0.1), int(both.sum())


def test_the_kept_labels_are_the_teachers_better_ones(clip, labelled):
    _, truth, _ = clip
    sure, kept = against_truth(labelled / "sure", truth)
    everything, said = against_truth(labelled / "all", truth)
    assert 0.3 * said < kept < said
    assert sure > everything + 0.03, (sure, everything)
    summary = json.loads((labelled / "sure" / "label.json").read_text())
    assert summary["people_seen"] == json.loads((labelled / "all" / "label.json").read_text())["people_seen"] > 80
    assert summary["rules"] == {"min_score": 0.5, "max_flip_gap": 0.05, "max_jump": 0.05, "min_keypoints": 4}


def test_train_and_validation_are_apart_in_time(labelled):
    fps = 15
    sides = {}
    for side in ("train", "val"):
        coco = json.loads((labelled / "all" / side / "keypoints.json").read_text())
        sides[side] = sorted(int(im["file_name"].rsplit("_", 1)[1].split(".")[0]) for im in coco["images"])
    assert sides["train"] and sides["val"]
    assert sides["val"][0] - sides["train"][-1] > 1.0 * fps  # --gap-s 1 between them
    share = len(sides["val"]) / (len(sides["train"]) + len(sides["val"]))
    assert 0.15 < share < 0.3


def test_the_dataset_is_finetunes_as_it_is(labelled, tmp_path):
    data = labelled / "sure"
    train = read_pose_set(data / "train" / "keypoints.json")
    assert train.labelled.sum() == 23 and len(train) > 50
    parts = read_dense_set(data / "train", "seg")
    assert (np.concatenate([t.ravel() for t in parts.targets]) == 255).mean() < 0.5  # the sides mostly agree
    mattes = read_dense_set(data / "val", "matting")
    assert len(mattes) and 0 < np.mean([t.mean() for t in mattes.targets]) < 0.5
    code, err = cli("finetune", "pose", "--data", data, "--output", tmp_path / "student", "--steps", 4,
                    "--batch-size", 4, "--input-size", "64x48", "--device", "cpu", "--workers", 0)  # fmt: skip
    assert code == 0, err
    options = json.loads((tmp_path / "student" / "training.json").read_text())
    assert (options["data"], options["val"]) == (str(data / "train"), str(data / "val"))


def test_mirroring_matches_the_renderers_mirror():
    width = 320
    rng = np.random.default_rng(1)
    keypoints = np.c_[rng.uniform(0, width - 1, (308, 2)), np.full(308, 2.0)].astype(np.float32)
    box = np.array([40.0, 20.0, 60.0, 150.0], np.float32)
    seen, seen_box = mirrored(keypoints, box, width)  # what the renderer's mirrored clip says
    assert np.allclose(unmirror_keypoints(seen[:, :2], width), keypoints[:, :2])
    assert np.allclose(mirror_boxes(box[None], width)[0], seen_box)
    labels = rng.integers(0, 29, (6, 10)).astype(np.uint8)
    swap = np.asarray(seg_metadata().flip_indices)
    assert (unmirror_parts(swap[labels[:, ::-1]].astype(np.uint8)) == labels).all()


def test_steadiness_and_the_rules():
    def record(frame, x):
        return recorded_frame(
            {
                "frame": frame,
                "pts": frame / 10,
                "people": [{"track_id": 7, "box": [0, 0, 10, 10], "score": 0.9, "keypoints": [[x, 5.0]] * 308}],
            }
        )

    steady = TrackSteadiness([record(f, 2.0 * f + (9 if f == 5 else 0)) for f in range(8) if f != 2])
    assert np.allclose(steady.jump(7, 4), 4.5)  # its neighbour 5 jumped by 9: half of it shows at 4
    assert np.allclose(steady.jump(7, 5), 9.0)
    assert np.allclose(steady.jump(7, 7 - 1), 4.5)
    assert np.allclose(steady.jump(7, 3), 0.0)  # frame 2 missing: 1 and 4 are its neighbours, on the line
    assert np.isinf(steady.jump(7, 0)).all() and np.isinf(steady.jump(7, 7)).all()  # no neighbour before / after
    assert np.isinf(steady.jump(8, 3)).all()
    rules = Sureness(min_score=0.5, max_flip_gap=0.05, max_jump=0.05)
    box = [0, 0, 50, 100]  # 5 px is the limit of both distances
    scores, gap, jump = np.full(308, 0.9), np.full(308, 1.0), np.full(308, 1.0)
    scores[0], gap[1], jump[2], jump[3] = 0.4, 6.0, 6.0, np.inf
    wanted = np.ones(308, bool)
    wanted[4] = False
    sure = sure_keypoints(scores, gap, jump, box, wanted, rules)
    assert not sure[:5].any() and sure[5:].all()


def test_split_by_time():
    person = {"track_id": 1, "box": [0, 0, 10, 10], "score": 0.9}
    records = [recorded_frame({"frame": f, "pts": f / 10, "people": [person] if f != 50 else []}) for f in range(100)]
    sides = split_by_time(records, 0.2, 1.0)
    val = sorted(f for f, s in sides.items() if s == "val")
    train = sorted(f for f, s in sides.items() if s == "train")
    assert val == list(range(80, 100)) and train == [f for f in range(70) if f != 50]
    assert set(split_by_time(records, 0.0, 1.0).values()) == {"train"}


def test_bad_input_is_one_line(clip, labelled, tmp_path):
    folder, _, teacher = clip
    cases = [
        (["label", tmp_path / "none.mp4", "--output", tmp_path / "a"], "no such video or run folder"),
        (["label", folder / "cross.mp4", "--pipeline", tmp_path / "none.yaml", "--output", tmp_path / "b"],
         "no such pipeline file"),
        (["label", labelled / "sure" / "teacher" / "cross", "--output", labelled / "sure"], "already holds a dataset"),
        (["label", labelled / "sure" / "teacher" / "cross", "--output", tmp_path / "c", "--val-share", "1"],
         "--val-share"),
        (["label", labelled / "sure" / "teacher" / "cross", "--output", tmp_path / "d", "--min-score", "99"],
         "the teacher was sure of no one"),
    ]  # fmt: skip
    no_pose = tmp_path / "no_pose.yaml"
    no_pose.write_text(yaml.safe_dump({"models": {"seg": {"source": str(toy_model("seg"))}}}))
    cases.append((["label", folder / "cross.mp4", "--pipeline", no_pose, "--output", tmp_path / "e"], "pose model"))
    for args, said in cases:
        code, err = cli(*args)
        assert code == 2 and said in err and "Traceback" not in err, (args, err)
        assert len(err.strip().splitlines()) == 1, err
    assert (tmp_path / "d" / "label.json").exists()  # what was done stays, with its counts
    assert not (tmp_path / "a").exists() and not (tmp_path / "e").exists()


def test_blazepose_points_map_onto_the_308_by_name():
    """The real-footage benchmark's teacher (MediaPipe's BlazePose, run outside this suite): its landmarks that are
    the 308's own, by name, kept where seen inside the crop the teacher was shown."""
    from benchmarks.real_footage import SAME_POINTS, to_308_names

    names = pose_metadata().names
    assert set(SAME_POINTS.values()) <= set(names) and len(SAME_POINTS) == 19
    assert {"left_wrist", "right_wrist", "left_heel", "right_heel"} <= set(SAME_POINTS.values())
    landmarks = [[100.0 + i, 200.0, 0.9] for i in range(33)]
    landmarks[15][2] = 0.3  # BlazePose's left wrist, hardly visible
    landmarks[27][:2] = [400.0, 200.0]  # the left ankle outside the 1.25x crop of the box
    points = to_308_names(landmarks, [80.0, 150.0, 80.0, 120.0], 768, 576)
    labelled = {name for name, p in zip(SAME_POINTS.values(), points, strict=True) if p[2] > 0}
    assert labelled == set(SAME_POINTS.values()) - {"left_wrist", "left_ankle"}
    assert points[list(SAME_POINTS).index(25), 0] == 125.0  # BlazePose 25, the left knee, where it was
    assert not to_308_names(None, [0, 0, 10, 10], 768, 576).any()
