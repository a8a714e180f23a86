"""The whole pipeline scored against known truth: `python -m benchmarks.quality [--plot docs/quality.png]`.

Clips of synthetic people (`sapiens2_stream.humans`), run through `stream()` with the shipped toy models (tiny,
trained on such people: they see the figures) and boxes from the clips' truth (the detector is the one part not
trained here). Each figure is measured with and without the feature it is about, in the same run:

- pose: PCK@0.05 / 0.1 of the box and left/right swaps, flip TTA off / on, on the clips and on a mirrored clip;
- smoothing: jitter (acceleration error, px/frame^2) and lag (frames) of each method's keypoints;
- tracking: ID switches and IDF1 of the tracker, against numbering people by their place in each frame;
- events: crossing and fall precision / recall from the model's own keypoints, smoothing on / off;
- dense: part-label mIoU and matte IoU, and how much they flicker, temporal filter off / on;
- 3-D: joints in metres from pose and pointmap together, the lifter against the pointmap read at each keypoint;
- live: results kept of a camera 4x faster than real time, and their PCK;
- distil: `label`'s kept labels against the truth, and students trained on them against the teacher
  (`benchmarks/distil.py`; `--skip-distil` leaves its 8 minutes out).

Scores are on renders, not on the released Sapiens2 models: they say the pipeline around a model is right.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
from scipy.optimize import linear_sum_assignment

import sapiens2_stream as s2
from benchmarks.distil import distil_rows
from sapiens2_stream.humans.body import KEYPOINTS
from sapiens2_stream.humans.clips import SCENES, render_clip, write_clip
from sapiens2_stream.models.metadata import keypoint_index, pose_metadata
from sapiens2_stream.models.toy import toy_model
from sapiens2_stream.threed.body import BODY_JOINTS
from sapiens2_stream.train.metrics import event_scores, identity_scores, left_right_swaps, miou, pck

FPS = 15
SIZE = (240, 320)
SMOOTHERS = ("none", "kalman", "one_euro", "adaptive")


def clips(folder: Path) -> dict[str, dict]:
    """Each scene's video and truth (and the crossing scene mirrored)."""
    out = {}
    for name, mirror in (("crossing", False), ("fall", False), ("everything", False), ("crossing", True)):
        key = name + (" mirrored" if mirror else "")
        out[key] = write_clip(folder / f"{key.replace(' ', '_')}.mp4", SCENES[name](), FPS, SIZE, mirror=mirror)
    return out


def run(clip: dict, tasks=("pose",), output: Path | None = None, **options) -> list:
    models = {t: str(toy_model(t)) for t in tasks}
    detector = {"type": "file", "path": clip["path"]}
    out = str(output) if output else None
    return list(
        s2.stream(
            clip["path"].replace(".truth.json", ".mp4"),
            models=models,
            detector=detector,
            device="cpu",
            output=out,
            **options,
        )
    )


def pairs(results: list, clip: dict, attr: str = "keypoints") -> list[tuple]:
    """(result person, frame index, truth person's index in the frame) for every truth person a result person
    with `attr` matches (box centres within half a box)."""
    out = []
    for result in results:
        people = clip["frames"][result.frame_index]["people"]
        found = [p for p in result.people if getattr(p, attr) is not None]
        if not people or not found:
            continue
        d = np.array([[np.hypot(*(centre(t["box"]) - centre(p.box))) for p in found] for t in people])
        for r, c in zip(*linear_sum_assignment(d), strict=True):
            if d[r, c] < 0.5 * max(people[r]["box"][2:]):
                out.append((found[c], result.frame_index, r))
    return out


def matched(results: list, clip: dict, attr: str = "keypoints") -> tuple[np.ndarray, ...]:
    """(pred [N, 308, 2], truth [N, 308, 3], boxes [N, 4]) of every matched truth person."""
    found = pairs(results, clip, attr)
    people = [clip["frames"][f]["people"][i] for _, f, i in found]
    return (
        np.array([getattr(p, attr) for p, _, _ in found]),
        np.array([t["keypoints"] for t in people]),
        np.array([t["box"] for t in people]),
    )


def centre(box) -> np.ndarray:
    return np.array([box[0] + box[2] / 2, box[1] + box[3] / 2])


def pose_rows(videos: dict) -> list[dict]:
    rows = []
    for name, clip in videos.items():
        for flip in ("off", "on"):
            pred, truth, boxes = matched(run(clip, flip=flip), clip)
            rows.append(
                {
                    "clip": name,
                    "flip": flip,
                    "pck@0.05": pck(pred, truth, boxes, 0.05),
                    "pck@0.1": pck(pred, truth, boxes, 0.1),
                    "lr_swaps": left_right_swaps(pred, truth, boxes, pose_metadata().flip_pairs),
                }
            )
    return rows


def jitter_and_lag(pred: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    """Acceleration error (px/frame^2) over the joints seen in three frames running, and the delay (frames)
    that best lines the prediction up with the truth."""
    seen = (truth[:-2, :, 2] > 0) & (truth[1:-1, :, 2] > 0) & (truth[2:, :, 2] > 0)
    acc_p = pred[2:] - 2 * pred[1:-1] + pred[:-2]
    acc_t = truth[2:, :, :2] - 2 * truth[1:-1, :, :2] + truth[:-2, :, :2]
    jitter = float(np.linalg.norm(acc_p - acc_t, axis=-1)[seen].mean())
    errors = []
    for lag in range(0, 6):
        a, b = pred[lag:], truth[: len(truth) - lag]
        ok = b[..., 2] > 0
        errors.append(np.linalg.norm(a - b[..., :2], axis=-1)[ok].mean())
    return jitter, float(np.argmin(errors))


def track_of(results: list, clip: dict, person: int) -> tuple[np.ndarray, np.ndarray]:
    """One truth person's smoothed keypoints and truth over the frames where a track covers them."""
    pred, truth = [], []
    for result in results:
        t = [p for p in clip["frames"][result.frame_index]["people"] if p["id"] == person]
        if not t or not result.people:
            continue
        near = min(result.people, key=lambda p: np.hypot(*(centre(p.box) - centre(t[0]["box"]))))
        if near.smoothed is not None:
            pred.append(near.smoothed)
            truth.append(t[0]["keypoints"])
    return np.array(pred), np.array(truth)


def smoothing_rows(clip: dict) -> list[dict]:
    rows = []
    body = [keypoint_index()[n] for n in BODY_JOINTS]
    for method in SMOOTHERS:
        pred, truth = track_of(run(clip, smoothing=method, flip="on"), clip, 1)
        jitter, lag = jitter_and_lag(pred[:, body], truth[:, body])
        err = float(np.linalg.norm(pred[:, body] - truth[:, body, :2], axis=-1)[truth[:, body, 2] > 0].mean())
        rows.append({"method": method, "jitter_px": jitter, "lag_frames": lag, "error_px": err})
    return rows


def tracking_rows(clip: dict) -> list[dict]:
    results = run(clip, flip="off")
    tracked, by_place = [], []
    for result in results:
        truth = {p["id"]: centre(p["box"]) for p in clip["frames"][result.frame_index]["people"]}
        tracked.append((truth, {p.track_id: centre(p.box) for p in result.people}))
        order = sorted(result.people, key=lambda p: p.box[0])
        by_place.append((truth, {i: centre(p.box) for i, p in enumerate(order)}))
    return [
        {"ids": "tracker", **identity_scores(tracked, 40)},
        {"ids": "place in frame", **identity_scores(by_place, 40)},
    ]


def event_rows(videos: dict, folder: Path) -> list[dict]:
    """Crossings of the middle line and falls said by the events stage, against the clips' truth (within 1 s)."""
    events = {"lines": {"middle": {"points": [[0.5, 0.0], [0.5, 1.0]]}}, "poses": {"fall": True}}
    rows = []
    for method in ("none", "adaptive"):
        counts = {kind: {"found": 0, "true": 0, "hits": 0} for kind in ("crossings", "falls")}
        for name in ("crossing", "fall", "everything"):
            out = folder / f"events-{name}-{method}"
            run(videos[name], output=out, set={"events": events}, smoothing=method, flip="on")
            said = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
            found = {
                "crossings": [e["time_s"] for e in said if e.get("kind") == "crossing"],
                "falls": [e["time_s"] for e in said if e.get("kind") == "fall"],
            }
            for kind in counts:
                truth = [e["time_s"] for e in videos[name][kind]]
                counts[kind]["hits"] += event_scores(found[kind], truth, 1.0)["hits"]
                counts[kind]["found"] += len(found[kind])
                counts[kind]["true"] += len(truth)
        for kind, c in counts.items():
            rows.append(
                {
                    "events": kind,
                    "smoothing": method,
                    **c,
                    "precision": c["hits"] / c["found"] if c["found"] else float("nan"),
                    "recall": c["hits"] / c["true"] if c["true"] else float("nan"),
                }
            )
    return rows


def dense_rows(clip_name: str, clip: dict) -> list[dict]:
    truth = [(view.labels, view.alpha) for _, _, view in render_clip(SCENES[clip_name](), FPS, SIZE)]
    rows = []
    for temporal in ("off", "on"):
        results = run(clip, tasks=("pose", "seg", "matting"), temporal={"seg": temporal, "alpha": temporal})
        seg = [r.seg for r in results]
        alpha = [r.alpha for r in results]
        labels = [truth[r.frame_index][0] for r in results]
        mattes = [truth[r.frame_index][1] for r in results]
        inter = sum(((a > 0.5) & (t > 0.5)).sum() for a, t in zip(alpha, mattes, strict=True))
        union = sum(((a > 0.5) | (t > 0.5)).sum() for a, t in zip(alpha, mattes, strict=True))
        flicker = np.mean(
            [((a != b) & (ta == tb)).mean() for a, b, ta, tb in zip(seg, seg[1:], labels, labels[1:], strict=False)]
        )
        rows.append(
            {
                "temporal": temporal,
                "part_miou": miou(seg, labels, 29),
                "matte_iou": float(inter / union),
                "label_flicker": float(flicker),
            }
        )
    return rows


def threed_rows(clip_name: str, clip: dict) -> list[dict]:
    """Joints in metres (camera frame) against the bodies' own joints, from the toy pose and pointmap models: the
    3-D stage's lifter against reading the pointmap at each keypoint (a surface point, not the joint inside)."""
    views = [view for _, _, view in render_clip(SCENES[clip_name](), FPS, SIZE)]
    results = {r.frame_index: r for r in run(clip, tasks=("pose", "pointmap"), flip="on")}
    ids = [keypoint_index()[n] for n in KEYPOINTS]
    hips = [KEYPOINTS.index(n) for n in ("left_hip", "right_hip")]
    errors: dict[str, list] = {"lifter": [], "pointmap at the keypoint": []}
    for person, frame, index in pairs(list(results.values()), clip, "keypoints_3d"):
        truth = np.array([views[frame].people[index].camera_points[n] for n in KEYPOINTS])
        pointmap = results[frame].pointmap
        u, v = np.round(person.keypoints[ids]).astype(int).T
        inside = (u >= 0) & (u < pointmap.shape[1]) & (v >= 0) & (v < pointmap.shape[0])
        sampled = np.full((len(ids), 3), np.nan)
        sampled[inside] = pointmap[v[inside], u[inside]]
        lifted = np.where((person.keypoints_3d_confidence[ids] > 0)[:, None], person.keypoints_3d[ids], np.nan)
        for name, pred in (("lifter", lifted), ("pointmap at the keypoint", sampled)):
            errors[name].append((pred, truth))
    rows = []
    for name, found in errors.items():
        pred, truth = np.array([p for p, _ in found]), np.array([t for _, t in found])
        pred_root, truth_root = pred[:, hips].mean(1, keepdims=True), truth[:, hips].mean(1, keepdims=True)
        aligned = (pred - pred_root) - (truth - truth_root)  # the body's shape, wherever it stands
        rows.append(
            {
                "method": name,
                "mpjpe_m": float(np.nanmean(np.linalg.norm(pred - truth, axis=-1))),
                "root_depth_m": float(np.nanmean(np.abs(pred_root[..., 2] - truth_root[..., 2]))),
                "aligned_mpjpe_m": float(np.nanmean(np.linalg.norm(aligned, axis=-1))),
                "people": len(found),
            }
        )
    return rows


def live_rows(clip: dict, speed: int = 8) -> list[dict]:
    """The clip as a camera `speed` times faster than real time: the share of its frames that get results, and
    their PCK (against the file, every frame)."""
    rows = []
    path = clip["path"].replace(".truth.json", ".mp4")
    n = len(clip["frames"])
    for name, source in (("file", path), (f"camera x{speed}", f"lavfi:movie={path},setpts=PTS/{speed},realtime")):
        options = dict(models={"pose": str(toy_model("pose"))}, device="cpu", flip="auto")
        detector = {"type": "file", "path": clip["path"]}
        # a camera never ends: it stops after the clip's frames
        results = list(s2.stream(source, detector=detector, set={"source.max_frames": n}, **options))
        results = [r for r in results if r.frame_index < n]
        pred, truth, boxes = matched(results, clip)
        rows.append({"source": name, "kept": len(results) / n, "pck@0.1": pck(pred, truth, boxes, 0.1)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plot", help="also save the figure here (the docs use docs/quality.png)")
    parser.add_argument("--json", default="benchmarks/results/quality.json")
    parser.add_argument("--skip-distil", action="store_true", help="leave out label + finetune (8 minutes)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        videos = clips(folder)
        report = {
            "pose": pose_rows(videos),
            "smoothing": smoothing_rows(videos["everything"]),
            "tracking": tracking_rows(videos["crossing"]),
            "events": event_rows(videos, folder),
            "dense": dense_rows("crossing", videos["crossing"]),
            "threed": threed_rows("crossing", videos["crossing"]),
            "live": live_rows(videos["everything"]),
        }
        if not args.skip_distil:
            report["distil"] = distil_rows(folder / "distil")
    for section, rows in report.items():
        print(f"\n{section}")
        for row in rows:
            print("  " + "  ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=1))
    if args.plot:
        plot(report, args.plot)


def plot(report: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    pose = report["pose"]
    names = sorted({r["clip"] for r in pose}, key=[r["clip"] for r in pose].index)
    x = np.arange(len(names))
    for i, flip in enumerate(("off", "on")):
        axes[0].bar(
            x + 0.4 * i - 0.2,
            [next(r["pck@0.1"] for r in pose if r["clip"] == n and r["flip"] == flip) for n in names],
            0.4,
            label=f"flip {flip}",
        )
    axes[0].set_xticks(x, names, rotation=15)
    axes[0].set_title("PCK@0.1 (toy pose model)")
    axes[0].legend(loc="lower left")
    sm = report["smoothing"]
    axes[1].bar([r["method"] for r in sm], [r["jitter_px"] for r in sm])
    axes[1].set_title("jitter (px/frame², lower is steadier)")
    tr = report["tracking"]
    axes[2].bar([r["ids"] for r in tr], [r["idf1"] for r in tr])
    axes[2].set_title("IDF1 on a crossing")
    dn = report["dense"]
    axes[3].bar(["mIoU off", "mIoU on"], [r["part_miou"] for r in dn])
    axes[3].bar(["matte IoU off", "matte IoU on"], [r["matte_iou"] for r in dn])
    axes[3].set_title("parts and matte, temporal filter off / on")
    for ax in axes:
        ax.tick_params(labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    main()
