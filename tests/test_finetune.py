"""`finetune`: bad data is one line and exit 2 before anything is written; a short run on synthetic humans
learns (the loss falls, PCK rises); an interrupted run leaves `last/` loadable and `--resume` goes on; the result
loads in `run` as it is, at the input size it was trained at."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import cv2
import numpy as np
import pytest
import torch

from sapiens2_stream.cli import main
from sapiens2_stream.humans.clips import crossing, write_clip
from sapiens2_stream.humans.datasets import write_dataset
from sapiens2_stream.models import load_model
from sapiens2_stream.train.finetune import layer_groups
from tests.conftest import read_jsonl, run_on_clip


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("synth"), 40, seed=5, progress=False)


class Finished:
    def __init__(self, returncode: int, stderr: str) -> None:
        self.returncode, self.stderr = returncode, stderr


def finetune(*args) -> Finished:
    """The command line's `finetune`, in this process (its exit code and what it printed on stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["finetune", *map(str, args), "--no-progress"])
    return Finished(code, err.getvalue())


def copy(synth, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(synth, data)
    return data


def edit_coco(data, change):
    coco = json.loads((data / "keypoints.json").read_text())
    change(coco)
    (data / "keypoints.json").write_text(json.dumps(coco))
    return data / "keypoints.json"


def rename_keypoint(coco):
    coco["categories"][0]["keypoints"][9] = "left_wristt"


BAD_POSE = {
    "unknown keypoint names": (rename_keypoint, "unknown keypoint names: left_wristt"),
    "no annotations": (lambda coco: coco.update(annotations=[]), "no annotations with labelled keypoints"),
    "missing image": (lambda coco: coco["images"][0].update(file_name="images/nowhere.jpg"), "missing image"),
}


@pytest.mark.parametrize("case", list(BAD_POSE))
def test_bad_pose_data_is_one_line_and_exit_2(synth, tmp_path, case):
    change, said = BAD_POSE[case]
    path = edit_coco(copy(synth, tmp_path), change)
    out = tmp_path / "out"
    r = finetune("pose", "--data", path, "--output", out, "--steps", 5)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and said in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()  # nothing half-written


def test_unreadable_image_and_bad_masks_are_one_line_and_exit_2(synth, tmp_path):
    data = copy(synth, tmp_path)
    (data / "images" / "000002.jpg").write_bytes(b"not a jpeg at all")
    r = finetune("pose", "--data", data / "keypoints.json", "--output", tmp_path / "o1", "--steps", 5)
    assert r.returncode == 2 and "000002.jpg: missing or unreadable image" in r.stderr
    shutil.copy(synth / "images" / "000002.jpg", data / "images" / "000002.jpg")
    for sub, task in (("labels", "seg"), ("alpha", "matting")):
        mask = data / sub / "000003.png"
        cv2.imwrite(str(mask), np.zeros((100, 100), np.uint8))
        r = finetune(task, "--data", data, "--output", tmp_path / f"o-{task}", "--steps", 5)
        assert r.returncode == 2 and "100x100, but its image is 320x240" in r.stderr, r.stderr
        assert not (tmp_path / f"o-{task}").exists()
    cv2.imwrite(str(data / "labels" / "000003.png"), np.full((240, 320), 40, np.uint8))
    r = finetune("seg", "--data", data, "--output", tmp_path / "o3", "--steps", 5)
    assert r.returncode == 2 and "class ids [40] are not among the 29" in r.stderr
    np.save(data / "pointmap" / "000004.npy", np.zeros((240, 320), np.float16))
    r = finetune("pointmap", "--data", data, "--output", tmp_path / "o4", "--steps", 5)
    assert r.returncode == 2 and "a pointmap is [H, W, 3], not [240, 320]" in r.stderr, r.stderr
    (data / "normals" / "000004.png").unlink()
    r = finetune("normal", "--data", data, "--output", tmp_path / "o5", "--steps", 5)
    assert r.returncode == 2 and "000004.png: missing or unreadable normals PNG" in r.stderr, r.stderr


def test_other_keypoint_names_map_onto_the_308(synth, tmp_path):
    path = edit_coco(copy(synth, tmp_path), rename_keypoint)
    mapping = tmp_path / "map.json"
    mapping.write_text(json.dumps({"left_wristt": "left_wrist"}))
    r = finetune(
        "pose",
        "--data",
        path,
        "--keypoints",
        mapping,
        "--output",
        tmp_path / "out",
        "--steps",
        2,
        "--input-size",
        "64x48",
        "--batch-size",
        4,
    )
    assert r.returncode == 0, r.stderr
    assert load_model(tmp_path / "out" / "last").config.image_size == (64, 48)


def test_pose_learns_and_loads_in_run(synth, tmp_path):
    out = tmp_path / "pose"
    args = ["--steps", 160, "--batch-size", 16, "--input-size", "64x48", "--val-every", 80]
    r = finetune("pose", "--data", synth / "keypoints.json", "--output", out, *args)
    assert r.returncode == 0, r.stderr
    lines = read_jsonl(out / "metrics.jsonl")
    assert [line["step"] for line in lines] == [0, 80, 160]
    assert lines[-1]["loss"] < 0.8 * lines[1]["loss"]
    assert lines[-1]["pck@0.1"] > lines[0]["pck@0.1"] + 0.08, lines  # from random to finding joints
    # the checkpoint is a released-layout folder that a pipeline loads as it is, cropping at 64x48
    clip = tmp_path / "clip.mp4"
    truth = write_clip(clip, crossing(), fps=2)["path"]
    results = run_on_clip(tmp_path, clip, truth, f"{{pose: {{source: {out / 'best'}}}}}")
    assert len(results) == 12 and all(len(f["people"]) == 2 for f in results)


def start_finetune(args: list, out) -> subprocess.Popen:
    """The real command with a batch worker, started as a shell starts a background job (SIGINT ignored, which
    Python keeps), once it has written its first checkpoint."""
    p = subprocess.Popen(
        [sys.executable, "-m", "sapiens2_stream.cli", "finetune", *map(str, args), "--steps", "100000", "--workers",
         "1", "--no-progress"],
        stderr=subprocess.PIPE, text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    deadline = time.time() + 120
    while not (out / "resume" / "state.json").exists() and time.time() < deadline:
        time.sleep(0.2)
    return p


def test_ctrl_c_leaves_last_loadable_and_resume_goes_on(synth, tmp_path):
    out = tmp_path / "out"
    args = ["pose", "--data", synth / "keypoints.json", "--output", out, "--input-size", "64x48", "--batch-size", 4,
            "--val-every", 5]  # fmt: skip
    p = start_finetune(args, out)
    p.send_signal(signal.SIGINT)
    sent = time.monotonic()
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert time.monotonic() - sent < 10, err  # the step it was on, saving last/, the workers shut down
    model = load_model(out / "last", task="pose")
    assert model.config.image_size == (64, 48)
    step = json.loads((out / "resume" / "state.json").read_text())["step"]
    assert step >= 5
    r = finetune(*args, "--steps", step + 5, "--resume")
    assert r.returncode == 0, r.stderr
    steps = [line["step"] for line in read_jsonl(out / "metrics.jsonl")]
    assert steps[0] == 0 and steps[-1] == step + 5 and steps.count(0) == 1  # went on, did not start again


def test_ctrl_c_waits_for_the_step_and_a_second_quits_at_once(monkeypatch):
    from sapiens2_stream.train import ctrl_c as module

    def quit_now(code):
        raise SystemExit(code)

    monkeypatch.setattr(module.os, "_exit", quit_now)
    with module.ctrl_c() as interrupt:
        assert signal.getsignal(signal.SIGINT) == interrupt.handle
        with pytest.raises(KeyboardInterrupt):  # outside a step: at once
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
    interrupt = module.CtrlC()
    finished = False
    with pytest.raises(KeyboardInterrupt):
        with interrupt.hold():
            interrupt.handle(signal.SIGINT, None)  # noted only
            finished = True
    assert finished
    with pytest.raises(SystemExit) as quit:
        interrupt.handle(signal.SIGINT, None)
    assert quit.value.code == 130


def test_a_batch_a_worker_sends_holds_nothing_the_worker_keeps(synth):
    """Sending a CPU tensor moves its storage into shared memory in place, from the queue's feeder thread, while
    the worker may be reading it for its next batch: so a batch must hold only what was made for it (the keypoint
    channels were once sent with every batch and read freed memory: indices of 4e17)."""
    from sapiens2_stream.train.batches import StepBatches
    from sapiens2_stream.train.data import read_dense_set, read_pose_set

    for data, task in ((read_pose_set(synth / "keypoints.json"), "pose"), (read_dense_set(synth, "seg", None), "seg")):
        maker = StepBatches(data, task, (64, 48), 4, seed=3, sigma=2.0)
        kept = [t for t in vars(maker).values() if torch.is_tensor(t)] + [maker.data.images.block]
        kept_storages = {t.untyped_storage().data_ptr() for t in kept}
        batch = maker[0]
        assert batch and not kept_storages & {t.untyped_storage().data_ptr() for t in batch}, task


@pytest.mark.parametrize(
    "task,key", [("seg", "miou"), ("matting", "sad"), ("normal", "angle_deg"), ("pointmap", "abs_rel")]
)
def test_dense_tasks_train_on_a_pose_models_backbone(synth, tmp_path, tiny_dir, task, key):
    out = tmp_path / task
    args = ["--data", synth, "--from", tiny_dir["pose"], "--output", out, "--steps", 30, "--batch-size", 4]
    r = finetune(task, *args, "--input-size", "64x80", "--val-every", 15)
    assert r.returncode == 0, r.stderr
    lines = read_jsonl(out / "metrics.jsonl")
    assert lines[-1]["loss"] < lines[1]["loss"] and np.isfinite(lines[-1][key])
    model = load_model(out / "best", task=task)
    assert model.config.image_size == (64, 80) and model.task == task  # the pose backbone under a new head


def test_layer_wise_learning_rates_fall_from_the_head_down():
    from sapiens2_stream.models.tiny import random_model, tiny_config

    model = random_model(tiny_config("pose"))
    lr = {id(p): g["lr"] for g in layer_groups(model, 1e-3, 0.5, 0.1, "none") for p in g["params"]}
    named = dict(model.named_parameters())
    head, top, first, embed = (
        lr[id(named[n])]
        for n in (
            "decode_head.conv_pose.weight",
            "backbone.blocks.3.ffn.w3.weight",
            "backbone.blocks.0.attn.wq.weight",
            "backbone.patch_embed.projection.weight",
        )
    )
    assert head == pytest.approx(1e-3) and top == pytest.approx(5e-4) and first == pytest.approx(1e-3 * 0.5**4)
    assert embed == pytest.approx(1e-3 * 0.5**5)
    frozen = random_model(tiny_config("pose"))
    trained = {id(p) for g in layer_groups(frozen, 1e-3, 0.5, 0.1, "backbone") for p in g["params"]}
    names = {n for n, p in frozen.named_parameters() if id(p) in trained}
    assert names and all(n.startswith("decode_head.") for n in names)
    assert not any(p.requires_grad for p in frozen.backbone.parameters())


def test_batches_are_the_same_from_cuts_any_worker_count_and_after_a_resume(synth):
    from sapiens2_stream.train.augment import Jitter, pose_batch
    from sapiens2_stream.train.batches import StepBatches, batches, cut_people
    from sapiens2_stream.train.data import read_pose_set

    people = read_pose_set(synth / "keypoints.json")
    size, jitter = (128, 96), Jitter()  # these pictures hold no more detail than 128x96 uses: cut, not shrunk
    cut = cut_people(people, size, jitter)
    whole = pose_batch(people, np.arange(8), size, np.random.default_rng(1), jitter)
    from_cut = pose_batch(cut, np.arange(8), size, np.random.default_rng(1), jitter)
    assert (whole[0].int() - from_cut[0].int()).abs().max() <= 2  # rounding only
    assert torch_close(whole[1], from_cut[1], 1e-3) and bool((whole[2] == from_cut[2]).all())
    maker = StepBatches(people, "pose", size, 4, seed=3, sigma=2.0)
    cpu = torch.device("cpu")
    inline = list(batches(maker, 0, 4, 0, cpu))
    ahead = list(batches(maker, 0, 4, 1, cpu))
    resumed = list(batches(maker, 2, 4, 1, cpu))
    for a, b in zip(inline, ahead, strict=True):
        assert all(torch_close(x, y, 0) for x, y in zip(a, b, strict=True))
    for a, b in zip(inline[2:], resumed, strict=True):
        assert all(torch_close(x, y, 0) for x, y in zip(a, b, strict=True))
    assert not torch_close(inline[0][0], inline[1][0], 0)  # each step its own batch


def torch_close(a, b, tol: float) -> bool:
    return a.shape == b.shape and bool((a.double() - b.double()).abs().max() <= tol)


def test_colour_jitter_is_saturation_then_contrast_then_brightness():
    from sapiens2_stream.train.augment import colour_jitter

    images = np.random.default_rng(0).integers(0, 256, (3, 8, 6, 3), dtype=np.uint8)
    out = colour_jitter(images, np.random.default_rng(4), 0.25)
    s, c, b = np.random.default_rng(4).uniform(0.75, 1.25, (3, 3))
    for n, image in enumerate(images.astype(np.float64)):  # one step at a time, as the recipe says
        grey = image.mean(-1, keepdims=True)
        x = grey + (image - grey) * s[n]
        x = (x - x.mean()) * c[n] + x.mean()
        expected = np.clip(x * b[n], 0, 255)
        assert np.abs(out[n].astype(float) - expected).max() <= 1.0


def test_the_pose_loss_on_the_labelled_heatmaps_is_the_loss_on_all_308():
    from sapiens2_stream.train.augment import heatmap_batch
    from sapiens2_stream.train.losses import heatmap_loss

    rng = np.random.default_rng(2)
    crops = torch.from_numpy(rng.integers(0, 256, (2, 64, 48, 3), dtype=np.uint8))
    mus = torch.from_numpy(rng.uniform(0, 12, (2, 308, 2)).astype(np.float32))
    visible = torch.from_numpy(rng.random((2, 308)) < 0.8)
    labelled = torch.arange(0, 308, 13)
    _, some, some_w = heatmap_batch(crops, mus, visible, labelled, 2.0)
    every = torch.arange(308)
    _, full, full_w = heatmap_batch(crops, mus, visible & torch.isin(every, labelled), every, 2.0)
    predicted = torch.from_numpy(rng.random((2, 308, 16, 12)).astype(np.float32))
    assert float(heatmap_loss(predicted[:, labelled], some, some_w)) == pytest.approx(
        float(heatmap_loss(predicted, full, full_w)), rel=1e-5
    )


def test_the_step_takes_the_cores_other_processes_leave_idle(monkeypatch):
    from sapiens2_stream.train import threads

    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    readings = iter([(0.0, 0.0, 0.0), (1.0, 2.0, 0.5), (2.0, 3.0, 1.5), (2.1, 3.2, 1.6)])
    monkeypatch.setattr(threads.CoreShare, "sample", lambda self: next(readings))
    before = torch.get_num_threads()
    try:
        share = threads.CoreShare(most=2)
        assert share.adjust() == 1  # others kept 1.5 of the 2 cores busy: one thread
        assert share.adjust() == 2  # then only this process ran: both
        assert share.adjust() == 2  # 0.1 s is too soon to tell: unchanged
    finally:
        torch.set_num_threads(before)
