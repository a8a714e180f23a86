"""The inference engine's batch handling: out-of-memory splitting and bucket padding for compiled graphs."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from sapiens2_stream.runtime.device import give_thread_cuda_graph_state
from sapiens2_stream.runtime.engine import InferenceEngine
from sapiens2_stream.runtime.results import Person


def assert_same_people(expected, got):
    """Same peaks; same keypoints except where DARK is ill-conditioned on random heatmaps (see test_processing):
    there a change of batch size, which changes float rounding, can move a point."""
    for a, b in zip(expected, got, strict=True):
        assert np.allclose(a.keypoint_scores, b.keypoint_scores, atol=1e-4)
        error = np.abs(a.keypoints - b.keypoints).max(-1)
        assert (error < 0.01).mean() > 0.95 and np.median(error) < 1e-3


def test_out_of_memory_splits_the_batch(tiny_dir):
    from sapiens2_stream.io.sources import Frame
    from sapiens2_stream.runtime.options import ModelSection

    engine = InferenceEngine({"pose": ModelSection(str(tiny_dir["pose"]), input_size=[64, 48])}, torch.device("cpu"),
                             torch.float32)  # fmt: skip
    frame = Frame(0, 0.0, 0.0, np.random.default_rng(0).integers(0, 255, (120, 160, 3), dtype=np.uint8))
    people = lambda: [[Person(i, np.array([10.0 * i, 5, 40, 80]), 1.0) for i in range(6)]]  # noqa: E731
    expected = engine.run([frame], people())[0]
    backbone = engine.models["pose"].backbone  # every path (fused flip or not) goes through it
    original = backbone.forward

    def small_memory(x, *args, **kwargs):
        if x.shape[0] > 4:  # flip doubles the batch: only 2 crops fit
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return original(x, *args, **kwargs)

    backbone.forward = small_memory
    got = engine.run([frame], people())[0]
    assert any("out of memory on a batch of 6" in e for e in engine.events)
    assert_same_people(expected.people, got.people)


def test_compiled_bucketed_path_gives_the_same_outputs(tiny_dir):
    """The GPU path's torch.compile (static shapes, batches padded to buckets), compiled for real on CPU:
    outputs for the real items are unchanged by the padding. (About 45 s of compilation.)"""
    from sapiens2_stream.io.sources import Frame
    from sapiens2_stream.runtime.device import bucket_size
    from sapiens2_stream.runtime.options import ModelSection

    assert [bucket_size(n) for n in (1, 3, 5, 9, 33, 100)] == [1, 4, 8, 16, 64, 100]
    cfg = {"pose": ModelSection(str(tiny_dir["pose"]), input_size=[64, 48], flip="on")}
    plain = InferenceEngine(cfg, torch.device("cpu"), torch.float32)
    compiled = InferenceEngine(cfg, torch.device("cpu"), torch.float32, compiled=True)
    assert "pose" in plain.fused_flip and not compiled.fused_flip  # compiled graphs take the plain flip batch
    frame = Frame(0, 0.0, 0.0, np.random.default_rng(1).integers(0, 255, (120, 160, 3), dtype=np.uint8))
    people = lambda: [[Person(i, np.array([12.0 * i, 5, 40, 80]), 1.0) for i in range(5)]]  # noqa: E731
    assert_same_people(plain.run([frame], people())[0].people, compiled.run([frame], people())[0].people)
    # A compiled graph keeps no rotary table: on CUDA a kept one is a graph output the next replay overwrites.
    assert plain.models["pose"].backbone._rope_cache and not compiled.models["pose"].backbone._rope_cache


class ReplayingModel:
    """A stand-in for a CUDA-graph replay: every call with the same input shape writes its outputs into the same
    buffers and returns those buffers, so outputs kept from an earlier call are overwritten by the next one.
    `fits`: the largest batch that fits in (simulated) device memory."""

    def __init__(self, model, fits=64):
        self.model, self.fits, self.buffers = model, fits, {}

    def __call__(self, x):
        if x.shape[0] > self.fits:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        out = self.model(x)
        static = self.buffers.setdefault(tuple(x.shape), {})
        for name, value in vars(out).items():
            if isinstance(value, torch.Tensor):
                setattr(out, name, static.setdefault(name, torch.empty_like(value)).copy_(value))
        return out


def test_graph_outputs_survive_the_next_replay_in_split_and_chunked_batches(tiny_dir):
    """The compiled path (bucketed, CUDA graphs on a GPU) with a stand-in that reuses its output buffers as a
    replay does: an out-of-memory split and batches in several chunks still give each frame its own results."""
    from sapiens2_stream.io.sources import Frame
    from sapiens2_stream.runtime.options import ModelSection

    cfg = {"pose": ModelSection(str(tiny_dir["pose"]), input_size=[64, 48], max_batch=4, flip="off"),
           "matting": ModelSection(str(tiny_dir["matting"]), input_size=[64, 48], max_batch=2, flip="off")}  # fmt: skip
    rng = np.random.default_rng(2)
    frames = [Frame(i, i / 30, 0.0, rng.integers(0, 255, (120, 160, 3), dtype=np.uint8)) for i in range(5)]
    people = lambda: [[Person(j, np.array([20.0 * j, 5, 40, 80]), 1.0) for j in range(2)] for _ in frames]  # noqa: E731
    expected = InferenceEngine(cfg, torch.device("cpu"), torch.float32).run(frames, people())
    engine = InferenceEngine(cfg, torch.device("cpu"), torch.float32)
    engine.compiled, engine.fused_flip = True, set()  # the compiled path, with stand-ins for the graphs
    engine.runners = {
        "pose": ReplayingModel(engine.models["pose"], fits=2),  # 4 crops: split in two
        "matting": ReplayingModel(engine.models["matting"]),
    }  # 5 frames: chunks of 2, 2, 1
    got = engine.run(frames, people())
    assert any("pose: out of memory on a batch of 4" in e for e in engine.events)
    for a, b in zip(expected, got, strict=True):
        assert_same_people(a.people, b.people)
        assert np.allclose(a.alpha, b.alpha, atol=1e-5) and np.allclose(a.foreground, b.foreground, atol=1e-5)
    assert not np.allclose(got[0].alpha, got[2].alpha)  # the frames differ, so a shared buffer would show


def test_the_device_thread_gets_its_own_cuda_graph_state():
    """pytorch#123177: before torch 2.12 a compiled CUDA-graph model failed an assertion on any thread but the one
    that imported inductor, the engine's device thread included; the thread's initializer gives it that state."""
    from torch._inductor import cudagraph_trees as trees

    def state() -> dict:
        present = hasattr(trees.local, "tree_manager_containers") or torch._C._is_key_in_tls("tree_manager_containers")
        seen = {"present_before": present}
        give_thread_cuda_graph_state()
        seen["containers"] = torch._C._get_obj_in_tls("tree_manager_containers")
        seen["same_as_local"] = seen["containers"] is trees.local.tree_manager_containers
        seen["lock"] = trees.local.tree_manager_locks[0]
        return seen

    with ThreadPoolExecutor(max_workers=1) as fresh:
        seen = fresh.submit(state).result()
    assert not seen["present_before"]
    assert seen["same_as_local"] and hasattr(seen["lock"], "acquire")
    assert seen["containers"] is not trees.get_obj(trees.local, "tree_manager_containers")  # its own, not main's


def test_warm_up_compiles_every_shape_a_run_meets(tiny_dir, monkeypatch):
    """A compiled engine builds its graphs before the first frame: afterwards no batch a run can give (any number
    of people, fewer frames, flip TTA switched off under load) compiles again. Dynamo's own recompiles are
    counted, with a backend that records each compile and runs the graph as it is."""
    import sapiens2_stream.runtime.engine as engine_module
    from sapiens2_stream.io.sources import Frame
    from sapiens2_stream.runtime.options import ModelSection

    compiles = []

    def counting(gm, example_inputs):
        (pixels,) = [t for t in example_inputs if isinstance(t, torch.Tensor) and t.shape[-2:] == (64, 48)]
        compiles.append(pixels.shape[0])
        return gm.forward

    monkeypatch.setattr(engine_module, "compile_model",
                        lambda model, device: torch.compile(model, backend=counting, dynamic=False))  # fmt: skip
    torch._dynamo.reset()  # no graphs of earlier tests on the models' code object
    cfg = {"pose": ModelSection(str(tiny_dir["pose"]), input_size=[64, 48], max_batch=5, flip="auto"),
           "seg": ModelSection(str(tiny_dir["seg"]), input_size=[64, 48], flip="off"),
           "matting": ModelSection(str(tiny_dir["matting"]), input_size=[64, 48], flip="on")}  # fmt: skip
    engine = InferenceEngine(cfg, torch.device("cpu"), torch.float32, compiled=True)
    warmed = engine.warm_up(max_frames=3)
    assert warmed == {"pose": [1, 2, 4, 8, 16], "seg": [1, 2, 4], "matting": [2, 4, 8]}
    # one graph per model and forward batch size (4 crops flipped = 8 plain): 11, past dynamo's default limit of 8
    assert sorted(compiles) == sorted(sum(warmed.values(), []))
    compiled_before = len(compiles)
    rng = np.random.default_rng(3)
    frames = [Frame(i, i / 30, 0.0, rng.integers(0, 255, (120, 160, 3), dtype=np.uint8)) for i in range(3)]
    for count, people in ((1, 1), (2, 3), (3, 2), (3, 4)):  # 1 to 12 crops, in chunks of 5
        for under_load in (False, True):
            batch = [[Person(j, np.array([10.0 * j, 5, 40, 80]), 1.0) for j in range(people)] for _ in range(count)]
            results = engine.run(frames[:count], batch, under_load)
            assert results[0].people[0].keypoints.shape == (308, 2)
            assert results[-1].seg is not None and results[-1].alpha is not None
    assert len(compiles) == compiled_before
