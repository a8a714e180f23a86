"""The temporal filter's cost per frame on one core, against a frame interval at 30 frames/s (the share of a live
frame's time it takes):

- the API (`DenseStabilizer`, its own flow) for each kind at 512x288, the research's working size; part labels
  also at 256x144 with probabilities in, the size and form a run filters them at;
- in a run (`TemporalFilter`: one flow per source shared by the outputs) at 1280x720: the matte (alpha and its
  foreground), part labels (a person's 28 parts and the background, 256 pixels wide, labels enlarged to
  1280x720), normals, the pointmap; each filtered at the working width (640) and the change enlarged.

Run: `python -m benchmarks.temporal [--picture docs/steady_video.png]` (under a minute); the picture is the
README's before/after strip (the synthetic matte video of tests/test_temporal.py, from the repository root).
"""

from __future__ import annotations

import cv2
import numpy as np
import torch

from benchmarks.common import main_with_figure, median_seconds
from sapiens2_stream.io.sources import Frame
from sapiens2_stream.processing.dense import reduced_size
from sapiens2_stream.runtime.results import FrameResult, Person
from sapiens2_stream.runtime.task_sections import TemporalConfig
from sapiens2_stream.runtime.temporal_filter import TemporalFilter
from sapiens2_stream.temporal import DenseStabilizer

FRAMES = 30
CLASSES = 29
DENSE = ("seg", "seg_probabilities", "alpha", "foreground", "normals", "pointmap")  # a result's dense outputs


def panning(size: tuple[int, int], frames: int, rng) -> list[np.ndarray]:
    """A textured picture panning 4 pixels a frame: motion the flow follows, so every frame uses the history."""
    h, w = size
    texture = cv2.GaussianBlur(rng.random((h, w + frames * 4, 3)).astype(np.float32), (0, 0), 2) * 255
    return [np.ascontiguousarray(texture[:, 4 * i : 4 * i + w].astype(np.uint8)) for i in range(frames)]


def value(kind: str, size: tuple[int, int], rng, probabilities: bool = False) -> np.ndarray:
    h, w = size
    if kind == "alpha":
        return rng.random((h, w), dtype=np.float32)
    if kind == "seg":  # smooth part maps, as a model gives them (blobs a fortieth of the width across)
        logits = cv2.GaussianBlur(rng.normal(0, 1, (h, w, CLASSES)).astype(np.float32), (0, 0), w / 40)
        logits = np.moveaxis(logits * (4 / logits.std()), -1, 0)
        return np.exp(logits) / np.exp(logits).sum(0) if probabilities else logits
    if kind == "normal":
        n = rng.normal(0, 1, (h, w, 3)).astype(np.float32)
        return n / np.linalg.norm(n, axis=-1, keepdims=True)
    return rng.random((h, w), dtype=np.float32) + 1.0


def person_parts(size: tuple[int, int], rng) -> np.ndarray:
    """Class probabilities of a person's parts as a run filters them: the background class, and in a central
    ellipse (a quarter of the picture) smooth blobs of the other classes."""
    h, w = size
    parts = value("seg", size, rng, probabilities=True)
    yy, xx = np.mgrid[0:h, 0:w]
    outside = ((xx - w / 2) / (w / 4)) ** 2 + ((yy - h / 2) / (h / 2)) ** 2 > 1
    parts[:, outside] = 0.001 / CLASSES
    parts[0, outside] = 1 - 0.001 * (CLASSES - 1) / CLASSES
    return parts


def per_frame(call, frames: list) -> float:
    """The median seconds of `call(i)` over the frames after the first (which only stores its history): a busy
    machine's pauses would otherwise swing the mean."""
    index = iter(range(len(frames)))
    return median_seconds(lambda: call(next(index)), repeats=len(frames) - 1, warmup=1)


def api_rows(rng) -> list[dict]:
    rows = []
    for kind, size, probabilities in [("alpha", (288, 512), False), ("seg", (288, 512), False),
                                      ("seg", (144, 256), True), ("normal", (288, 512), False),
                                      ("depth", (288, 512), False)]:  # fmt: skip
        frames = panning(size, FRAMES, rng)
        data = [value(kind, size, rng, probabilities) for _ in frames]
        stab = DenseStabilizer(kind)
        seconds = per_frame(lambda i: stab(frames[i], data[i]), frames)  # noqa: B023
        form = " (probabilities)" if probabilities else ""
        rows.append(dict(name=f"stabilise {kind}{form} ({size[1]}x{size[0]}, one core)", ours_s=seconds,
                         baseline="a frame interval at 30 fps", baseline_s=1 / 30))  # fmt: skip
    return rows


def run_rows(rng, size=(720, 1280), count=12) -> list[dict]:
    """Each output of a run alone, then all four with their shared flow."""
    frames = panning(size, count, rng)
    h, w = size
    small = reduced_size(size, TemporalConfig().seg_width)  # the size a run filters part labels at

    def result(i: int) -> FrameResult:
        alpha, depth = value("alpha", size, rng), value("depth", size, rng)
        dense = dict(
            seg=rng.integers(0, CLASSES, size, dtype=np.uint8),
            seg_probabilities=person_parts(small, rng),
            alpha=alpha,
            foreground=alpha[..., None] * np.float32([0.5, 0.4, 0.3]),
            normals=value("normal", size, rng),
            pointmap=np.stack([depth * 0.1, depth * 0.2, depth], -1),
        )
        person = [Person(1, np.array([w / 4, 0, w / 2, h], np.float32), 1.0)]
        return FrameResult(Frame(i, i / 30, 0.0, frames[i]), person, **dense)

    results = [result(i) for i in range(len(frames))]
    rows = []
    for outputs in (["alpha"], ["seg"], ["normal"], ["pointmap"], ["alpha", "seg", "normal", "pointmap"]):
        steady = TemporalFilter(TemporalConfig(), outputs)
        # each call on a fresh result, dropped after (as a run drops what it wrote): memory is reused, not grown
        fresh = lambda r: FrameResult(r.frame, r.people, **{k: getattr(r, k) for k in DENSE})  # noqa: E731
        seconds = per_frame(lambda i: steady.apply(fresh(results[i])), frames)  # noqa: B023
        rows.append(dict(name=f"steady {' + '.join(outputs)} in a run ({w}x{h}, one core)", ours_s=seconds,
                         baseline="a frame interval at 30 fps", baseline_s=1 / 30))  # fmt: skip
    return rows


def run() -> list[dict]:
    threads = torch.get_num_threads(), cv2.getNumThreads()
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    try:
        rng = np.random.default_rng(0)
        return api_rows(rng) + run_rows(rng)
    finally:
        torch.set_num_threads(threads[0])
        cv2.setNumThreads(threads[1])


def picture(path: str) -> None:
    """Five still frames of the synthetic matte video: the model's matte and the steady one, and each one's change
    from the frame before (the flicker, 4x brighter), cropped to the person."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tests.test_temporal import video

    frames, _, model, _ = video(0)
    stab = DenseStabilizer("alpha")
    steady = np.array([stab(f, a) for f, a in zip(frames, model, strict=True)])
    times, crop = range(20, 25), (slice(14, 130), slice(30, 130))
    rows = [("frame", [frames[t] for t in times], None), ("model's matte", [model[t] for t in times], "gray"),
            ("steady matte", [steady[t] for t in times], "gray"),
            ("model: change\nfrom previous (4x)", [4 * np.abs(model[t] - model[t - 1]) for t in times], "magma"),
            ("steady: change\nfrom previous (4x)", [4 * np.abs(steady[t] - steady[t - 1]) for t in times],
             "magma")]  # fmt: skip
    fig, axes = plt.subplots(len(rows), len(times), figsize=(7.5, 8.2), dpi=110)
    for r, (label, tiles, cmap) in enumerate(rows):
        for c, tile in enumerate(tiles):
            ax = axes[r, c]
            ax.imshow(tile[crop], cmap=cmap, vmin=0, vmax=1, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if c == 0:
                ax.set_ylabel(label, fontsize=8)
            if r == 0:
                ax.set_title(f"frame {times[c]}", fontsize=8)
            if cmap == "magma":  # the mean change over the whole frame, as the flicker figures count it
                ax.set_xlabel(f"mean {1e3 * tile.mean() / 4:.1f} / 1000", fontsize=7)
    fig.suptitle("A person standing still: the per-frame matte flickers, the steady one does not", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    print(f"saved {path}")


if __name__ == "__main__":
    main_with_figure(run, picture, "picture", "the before/after strip of the README")
