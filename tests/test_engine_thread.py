"""How device work is done: one dedicated thread for every model call (also across runs that share the loaded
models), each micro-batch uploaded once, every task launched before anything is copied back, one synchronise;
the dtype `auto` picks; the batch sizes the planner picks for live input and for files."""

import threading

import numpy as np
import pytest
import torch

from sapiens2_stream.runtime import device as device_module
from sapiens2_stream.runtime.device import DeviceTransfers, resolve_dtype
from sapiens2_stream.runtime.flow import ModelClock, Planner
from sapiens2_stream.runtime.pipeline import Pipeline, load_models
from tests.test_pipeline import config


class RecordingTransfers(DeviceTransfers):
    """A stand-in for the device that records what the engine asks of it, in order."""

    def __init__(self, log):
        super().__init__(torch.device("cpu"))
        self.log, self.current = log, None

    def upload(self, images):
        self.log.append(("upload", len(images)))
        return super().upload(images)

    def stream(self, task):
        recorder = self

        class Context:
            def __enter__(self):
                recorder.current = task

            def __exit__(self, *exc):
                recorder.current = None

        return Context()

    def to_host(self, tensor):
        self.log.append(("to_host", self.current))
        return super().to_host(tensor)

    def synchronize(self):
        self.log.append(("synchronize",))


def test_every_model_call_runs_on_one_device_thread_across_runs(tmp_path, tiny_dir, tmp_path_factory):
    from sapiens2_stream.io.synthetic import make_clip

    clip = tmp_path_factory.mktemp("clip") / "c.mp4"
    make_clip(clip, frames=10, size=(120, 160), people=1)
    cfg = config(tmp_path, tiny_dir, clip, tasks=("pose", "seg"),
                 models={m: {"source": str(tiny_dir[m]), "input_size": [64, 48]} for m in ("pose", "seg")},
                 runtime={"max_frames_per_batch": 2}, outputs={"video": {"enabled": False}})  # fmt: skip
    loaded = load_models(cfg)
    threads = []
    for model in loaded.engine.models.values():
        model.backbone.register_forward_hook(lambda *_: threads.append(threading.get_ident()))
    try:
        for _ in range(2):  # two runs on the same loaded models, as batch workers do
            assert Pipeline(cfg, loaded=loaded).run()["totals"]["frames_out"] == 10
    finally:
        loaded.close(wait=True)
    assert len(threads) >= 2 * 5 * 2  # every batch, both tasks, both runs
    assert len(set(threads)) == 1 and threads[0] != threading.main_thread().ident


def test_a_batch_uploads_once_launches_every_task_then_copies_and_synchronises_once(tiny_dir):
    from sapiens2_stream.io.sources import Frame
    from sapiens2_stream.runtime.engine import InferenceEngine
    from sapiens2_stream.runtime.options import ModelSection
    from sapiens2_stream.runtime.results import Person

    models = {t: ModelSection(str(tiny_dir[t]), input_size=[64, 48], flip="on") for t in ("pose", "seg", "matting")}
    engine = InferenceEngine(models, torch.device("cpu"), torch.float32)
    log = []
    engine.transfers = RecordingTransfers(log)
    for task, model in engine.models.items():
        model.backbone.register_forward_hook(lambda *_, t=task: log.append(("forward", t, engine.transfers.current)))
    rng = np.random.default_rng(0)
    frames = [Frame(i, i / 30, 0.0, rng.integers(0, 255, (120, 160, 3), dtype=np.uint8)) for i in range(3)]
    people = [[Person(1, np.array([10.0, 5, 40, 80]), 1.0)] for _ in frames]
    results = engine.run(frames, people)

    assert log[0] == ("upload", 3) and [e for e in log if e[0] == "upload"] == [("upload", 3)]
    forwards = [i for i, e in enumerate(log) if e[0] == "forward"]
    copies = [i for i, e in enumerate(log) if e[0] == "to_host"]
    assert {log[i][1] for i in forwards} == {"pose", "seg", "matting"}
    assert all(log[i][1] == log[i][2] for i in forwards)  # each task's forward on its own stream
    assert max(forwards) < min(copies)  # every forward launched before the first copy back
    assert log[-1] == ("synchronize",) and log.count(("synchronize",)) == 1
    assert {log[i][1] for i in copies} == {"pose", "seg", "matting"}  # copies queued on their task's stream
    assert results[2].seg.shape == (120, 160) and results[2].alpha.shape == (120, 160)
    assert results[1].people[0].keypoints.shape == (308, 2)


def test_dtype_auto_needs_native_bf16_units(monkeypatch):
    """oneDNN says bf16 is supported on any AVX-512 CPU (emulated there, about 2x slower than fp32); auto follows
    the real units instead, and says why."""
    cpu = torch.device("cpu")
    monkeypatch.setattr(device_module, "kernel_cap", lambda: None)  # kernels not held below the units (as here)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    dtype, why = resolve_dtype("auto", cpu)
    assert dtype == torch.float32 and "no native bf16" in why
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    assert resolve_dtype("auto", cpu) == (torch.bfloat16, "auto: the CPU has native bf16 (AVX512-BF16)")
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert device_module.cpu_bf16_units() == ["AMX", "AVX512-BF16"]
    assert resolve_dtype("fp32", cpu) == (torch.float32, "runtime.dtype")


class FakeWaiting:
    """A source's waiting frames as the planner sees them."""

    def __init__(self, live, waiting):
        self.live, self.waiting_n = live, waiting
        self.taken = []

    def admission(self):
        return self.waiting_n

    def take(self, n):
        self.waiting_n -= n
        self.taken.append(n)
        return [object()] * n

    def under_load(self):
        return False

    def served_share(self):
        return 0.0

    def arriving_fps(self):
        return 0.0


class FakeStream:
    def __init__(self, live, waiting):
        self.reading, self.waiting = True, FakeWaiting(live, waiting)


@pytest.mark.parametrize("cost,expected", [(None, 1), (2.0, 1), (0.45, 2), (0.3, 3), (0.1, 4)])
def test_live_batches_fit_the_latency_budget(cost, expected):
    """One batch of processing within max_frame_age_s (1 s here), at most max_frames_per_batch (4), at least 1."""
    planner = Planner([FakeStream(True, 10)], ModelClock(), max_frames=4, budget_s=1.0)
    planner.clock.cost_per_frame = cost
    assert planner.size() == expected and len(planner.take()) == expected


def test_files_take_full_batches_and_sources_share_fairly():
    file_only = Planner([FakeStream(False, 10)], ModelClock(), max_frames=4, budget_s=1.0)
    file_only.clock.cost_per_frame = 2.0  # slow models do not shrink file batches: throughput
    assert file_only.size() == 4
    cams = [FakeStream(True, 10) for _ in range(3)]
    planner = Planner(cams, ModelClock(), max_frames=4, budget_s=1.0)
    planner.clock.cost_per_frame = 2.0  # one frame per batch: the cameras take turns
    for _ in range(6):
        planner.take()
    assert [c.waiting.taken for c in cams] == [[1, 1]] * 3
    planner.clock.cost_per_frame = 0.45  # two per batch: the next batch starts after the last camera served
    assert [[cams.index(i.stream) for i in planner.take()] for _ in range(3)] == [[0, 1], [2, 0], [1, 2]]
    assert [len(c.waiting.taken) for c in cams] == [4, 4, 4]
    stalled = Planner([FakeStream(True, 0), FakeStream(True, 5)], ModelClock(), max_frames=4, budget_s=1.0)
    stalled.clock.cost_per_frame = 0.3
    assert len(stalled.take()) == 3  # a camera with nothing waiting holds back no one


def test_dtype_auto_follows_kernels_held_to_avx2():
    """A machine whose kernels are held to AVX2 (another CPU, or ATEN_CPU_CAPABILITY / ONEDNN_MAX_CPU_ISA set to
    check the suite as one would run) gets fp32 from auto, and the summary says why; what the CPU has is asked
    of the kernels in use, not of the chip alone."""
    import os
    import subprocess
    import sys

    ask = "import torch; from sapiens2_stream.runtime.device import resolve_dtype; print(resolve_dtype('auto', torch.device('cpu')))"  # noqa: E501
    clean = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")}
    # the chip's own kernels, asked without this suite's holds (a run of it held to AVX2 must pass too); a CPU
    # without AVX-512 holds PyTorch's kernels to AVX2 first
    native = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                            env=clean, capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    onednn = "oneDNN is held to AVX2" if native.startswith(("AVX512", "AMX")) else "PyTorch's CPU kernels are held to"
    for env, expected in (({"ATEN_CPU_CAPABILITY": "avx2"}, "PyTorch's CPU kernels are held to AVX2"),
                          ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, onednn)):  # fmt: skip
        out = subprocess.run([sys.executable, "-c", ask], env={**clean, **env}, capture_output=True, text=True)
        assert "torch.float32" in out.stdout and expected in out.stdout, out.stdout + out.stderr


def test_a_run_gives_back_the_callers_torch_thread_setting(tmp_path, tiny_dir):
    """`runtime.threads` is the run's, not the process's: torch's setting is process-wide, so a Python API user's
    own torch work after a run (or a second pipeline without the key) must find the setting it had before."""
    from sapiens2_stream.io.synthetic import make_clip

    clip = tmp_path / "c.mp4"
    make_clip(clip, frames=3, size=(120, 160), people=1)
    before = torch.get_num_threads()
    caller = 1 if before != 1 else 2
    torch.set_num_threads(caller)
    seen = []
    try:
        cfg = config(tmp_path, tiny_dir, clip, runtime={"threads": caller + 1}, outputs={"video": {"enabled": False}})
        pipeline = Pipeline(cfg, on_result=lambda *_: seen.append(torch.get_num_threads()))
        assert torch.get_num_threads() == caller  # building it (the models loaded) leaves the setting as it was
        pipeline.run()
        assert seen and set(seen) == {caller + 1}  # ... the run works with its own
        assert torch.get_num_threads() == caller  # ... and gives the caller's back
    finally:
        torch.set_num_threads(before)
