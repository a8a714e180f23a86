"""People in metres: the 3-D lifter's cost per person and frame, against the 2-D keypoint smoother that already runs
on every person and frame, and its accuracy on the synthetic scenes of tests/scenes3d.py (known truth).

Run: `python -m benchmarks.threed [--plot docs/threed.png]`.
"""

from __future__ import annotations

import time

import numpy as np

from benchmarks.common import main_with_figure
from sapiens2_stream.threed import Lifter
from sapiens2_stream.track import OnlineSmoother


def lifter_seconds(cam, views) -> tuple[float, int]:
    lifter = Lifter(cam.intrinsics)
    spent, people = 0.0, 0
    for i, view in enumerate(views):
        ids = list(range(len(view.truth)))
        start = time.perf_counter()
        lifter(view.keypoints, view.scores, view.pointmap, ids, i / 10)
        spent += time.perf_counter() - start
        people += len(ids)
    return spent, people


def smoother_seconds(views) -> tuple[float, int]:
    smoother = OnlineSmoother("adaptive")
    spent, people = 0.0, 0
    for i, view in enumerate(views):
        start = time.perf_counter()
        for p, keypoints in enumerate(view.keypoints):
            smoother(p, i / 10, keypoints, view.scores[p])
        spent += time.perf_counter() - start
        people += len(view.keypoints)
    return spent, people


def run() -> list[dict]:
    from tests.test_threed import rendered

    cam, views = rendered("two people")
    lifter_seconds(cam, views[:5])  # warm-up
    ours, people = lifter_seconds(cam, views)
    base, counted = smoother_seconds(views)
    return [dict(name="3-D lifter, per person and frame", ours_s=ours / people,
                 baseline="2-D adaptive smoother, per person and frame", baseline_s=base / counted)]  # fmt: skip


def plot(path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tests.test_threed import SCENES
    from tests.test_threed import run as run_scene

    names = list(SCENES)
    cases = {"exact pointmap": {}, "exact, no joint priors": {}, "noisy (2 cm, 5% scale)": {}}
    for name in names:
        cases["exact pointmap"][name] = run_scene(name, warm=10)["visible"].mean() * 100
        cases["noisy (2 cm, 5% scale)"][name] = run_scene(name, 0.02, 0.05, warm=10)["visible"].mean() * 100
    from sapiens2_stream.threed import lifter as module

    original = module.body.depth_priors
    module.body.depth_priors = lambda: np.zeros(308)
    try:
        for name in names:
            cases["exact, no joint priors"][name] = run_scene(name, warm=10)["visible"].mean() * 100
    finally:
        module.body.depth_priors = original
    fig, ax = plt.subplots(figsize=(8, 3.6), dpi=110)
    width = 0.27
    for k, (label, values) in enumerate(cases.items()):
        x = np.arange(len(names)) + (k - 1) * width
        ax.bar(x, [values[n] for n in names], width, label=label)
    ax.axhline(2, color="k", lw=0.8, ls="--")
    ax.set_xticks(np.arange(len(names)), names)
    ax.set_ylabel("visible joints, mean error (cm)")
    ax.set_title("3-D lifter on synthetic scenes with known truth (camera 4-5 m away)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)


if __name__ == "__main__":
    main_with_figure(run, plot, "plot", "a bar chart of the lifter's errors on the synthetic scenes")
