"""`sapiens2-stream batch`: outputs identical to `run` per clip, resumable after a kill, broken clips reported,
locally and on a local Ray instance."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from sapiens2_stream.io.synthetic import make_clip
from sapiens2_stream.runtime.batch_jobs import expand_inputs, output_names, run_batch
from sapiens2_stream.runtime.pipeline_config import load_config
from tests.test_pipeline import assert_same_records, read_jsonl


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    folder = tmp_path_factory.mktemp("clips")
    paths = [folder / "a.mp4", folder / "b.mp4", folder / "c.mp4"]
    for i, path in enumerate(paths):
        make_clip(path, frames=6 + 2 * i, size=(240, 320), people=1 + i % 2)
    return paths


@pytest.fixture(scope="module")
def spec(tmp_path_factory, tiny_dir):
    path = tmp_path_factory.mktemp("spec") / "batch.yaml"
    path.write_text(yaml.safe_dump({
        "source": {"uri": "placeholder.mp4"},
        "detector": {"type": "fixed", "boxes": [[40, 40, 60, 150], [180, 50, 60, 150]]},
        "models": {"pose": {"source": str(tiny_dir["pose"]), "input_size": [128, 96]}},
        "outputs": {"tracks": {"enabled": True}},
    }))  # fmt: skip
    return path


def cli(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "sapiens2_stream.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=300, **kwargs)  # fmt: skip


def assert_same_results(a, b):
    """The same records (see assert_same_records: float rounding differs with the thread count a Ray worker gets);
    everything but the numbers and the wall clock identical."""
    ra, rb = read_jsonl(a / "results.jsonl"), read_jsonl(b / "results.jsonl")
    assert_same_records(ra, rb)
    strip = lambda r: {k: v for k, v in r.items() if k not in ("wall", "people")}  # noqa: E731
    assert [strip(r) for r in ra] == [strip(r) for r in rb]


def test_inputs_from_files_globs_and_lists(tmp_path, clips):
    listing = tmp_path / "videos.txt"
    listing.write_text(f"# my videos\n{clips[0]}\n\n{clips[1]}\n")
    found = expand_inputs([str(listing), str(clips[0].parent / "*.mp4")])
    assert found == [c.resolve() for c in clips]  # de-duplicated, in order
    same_stem = [tmp_path / "x" / "a.mp4", tmp_path / "y" / "a.mp4"]
    assert list(output_names(same_stem).values()) == ["a", "a-2"]


def test_local_batch_equals_run_and_reports_broken_clips(tmp_path, clips, spec):
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"\x00" * 1000)
    out = tmp_path / "batch"
    result = cli("batch", spec, *clips, broken, "--output", out, "--no-progress")
    assert result.returncode == 1 and "broken.mp4" in result.stderr and "cannot open" in result.stderr
    manifest = json.loads((out / "manifest.json").read_text())["videos"]
    assert manifest[str(broken.resolve())]["status"] == "failed"
    assert manifest[str(broken.resolve())]["attempts"] == 3  # first try + 2 retries
    for clip in clips:
        assert manifest[str(clip.resolve())]["status"] == "done"
        single = tmp_path / f"run-{clip.stem}"
        assert cli("run", spec, "--source", clip, "--output", single, "--no-progress").returncode == 0
        assert_same_results(out / clip.stem, single)
        assert sorted(p.name for p in (out / clip.stem).iterdir()) == sorted(p.name for p in single.iterdir())
        assert json.loads((out / clip.stem / "summary.json").read_text())["totals"]["frames_out"] == len(
            read_jsonl(single / "results.jsonl"))  # fmt: skip
        assert len(list((out / clip.stem / "tracks").glob("*.npz"))) == len(list((single / "tracks").glob("*.npz")))


def test_killed_batch_resumes_without_redoing_finished_videos(tmp_path, clips, spec):
    out = tmp_path / "batch"
    proc = subprocess.Popen([sys.executable, "-m", "sapiens2_stream.cli", "batch", str(spec), *map(str, clips),
                             "--output", str(out), "--no-progress"], stderr=subprocess.DEVNULL)  # fmt: skip
    manifest = out / "manifest.json"
    deadline = time.time() + 120
    while time.time() < deadline and not manifest.exists():
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # no chance to clean up
    proc.wait()
    first = json.loads(manifest.read_text())["videos"]
    finished = [v for v, e in first.items() if e["status"] == "done"]
    assert 1 <= len(finished) < 3
    stamps = {v: (out / first[v]["output"] / "results.jsonl").stat().st_mtime_ns for v in finished}
    rerun = cli("batch", spec, *clips, "--output", out, "--no-progress")
    assert rerun.returncode == 0 and f"skipped (already done) {len(finished)}" in rerun.stderr
    final = json.loads(manifest.read_text())["videos"]
    assert all(e["status"] == "done" for e in final.values()) and len(final) == 3
    for video, stamp in stamps.items():
        assert (out / final[video]["output"] / "results.jsonl").stat().st_mtime_ns == stamp  # not redone


def start_local_ray(ray) -> None:
    """A local Ray instance of 2 CPUs (no cluster runs here), workers at normal priority as with --ray local."""
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             _system_config={"worker_niceness": 0})  # fmt: skip


def test_ray_batch_on_a_local_instance(tmp_path, clips, spec):
    ray = pytest.importorskip("ray")  # part of the dev extra; skipped only where a user installed without it
    start_local_ray(ray)
    try:
        config = load_config(spec)
        summary = run_batch(config, [str(c) for c in clips], str(tmp_path / "ray"), ray_address="auto", workers=2)
    finally:
        ray.shutdown()
    assert sorted(summary["done"]) == sorted(str(c.resolve()) for c in clips) and not summary["failed"]
    local = run_batch(config, [str(c) for c in clips[:1]], str(tmp_path / "local"))
    assert local["done"] == [str(clips[0].resolve())]
    assert_same_results(tmp_path / "ray" / "a", tmp_path / "local" / "a")


def test_ray_batch_survives_a_worker_killed_mid_video(tmp_path, clips, spec):
    """A worker process SIGKILLed while it processes a video (as the OOM killer does): Ray restarts it, the video
    is retried like any failed one, and the batch finishes with every video done."""
    ray = pytest.importorskip("ray")
    long = tmp_path / "long.mp4"
    make_clip(long, frames=120, size=(240, 320), people=2)
    start_local_ray(ray)
    box, killed = {}, []

    def kill_one_mid_video():
        deadline = time.time() + 120
        while time.time() < deadline and not killed:
            for proc in Path("/proc").iterdir():
                try:
                    if proc.name.isdigit() and (proc / "cmdline").read_bytes().startswith(b"ray::Worker.process"):
                        os.kill(int(proc.name), signal.SIGKILL)
                        killed.append(int(proc.name))
                        return
                except OSError:
                    pass
            time.sleep(0.05)

    try:
        killer = threading.Thread(target=kill_one_mid_video)
        killer.start()
        config = load_config(spec)
        box["summary"] = run_batch(config, [str(long), *map(str, clips)], str(tmp_path / "out"), "auto", workers=1)
        killer.join()
    finally:
        ray.shutdown()
    assert killed, "no worker was caught processing a video"
    summary = box["summary"]
    assert not summary["failed"] and len(summary["done"]) == 4
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())["videos"]
    assert max(e["attempts"] for e in manifest.values()) == 2  # the killed video, retried once
    assert len(read_jsonl(tmp_path / "out" / "long" / "results.jsonl")) == 120
