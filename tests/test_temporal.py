"""DenseStabilizer on synthetic video with known truth (the protocol of shared/research/temporal_stability.md): a
textured person (a soft ellipse) on a textured background, 30 frames still, 30 moving, 30 still; the stand-in
"model" is the truth with per-frame jitter and temporally independent, spatially correlated, edge-weighted noise.
The thresholds are the research's: flicker down by half, dtSSD down by a fifth, accuracy no worse."""

import cv2
import numpy as np
import pytest

from sapiens2_stream.temporal import DenseStabilizer

W, H, T = 256, 144, 90
STILL = slice(1, 30)  # frame pairs (t-1, t) of the first still part
MOVING = slice(30, 60)


def ellipse(cx, cy):
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    d = np.sqrt(((xx - cx) / 28) ** 2 + ((yy - cy) / 45) ** 2)
    return np.clip((1 - d) * 28 / 1.2 + 0.5, 0, 1)  # a 1.2 px soft edge


def video(seed, speed_px_s=200.0):
    """Frames (uint8 RGB), true alpha and the per-frame model's alpha."""
    rng = np.random.default_rng(seed)
    bg = cv2.GaussianBlur(rng.random((H, W, 3)).astype(np.float32), (0, 0), 2) * 0.6 + 0.2
    fg = cv2.GaussianBlur(rng.random((H, W, 3)).astype(np.float32), (0, 0), 1.5) * 0.5 + 0.4
    frames, truth, model = [], [], []
    for t in range(T):
        cx = 80 + speed_px_s / 30 * min(max(t - 30, 0), 30)
        g = ellipse(cx, 72)
        img = g[..., None] * np.roll(fg, int(round(cx - 80)), axis=1) + (1 - g[..., None]) * bg
        frames.append((np.clip(img + rng.normal(0, 0.01, img.shape), 0, 1) * 255).astype(np.uint8))
        noise = cv2.GaussianBlur(rng.normal(0, 1, (H, W)).astype(np.float32), (0, 0), 1.5) * 0.08 / 0.19
        jittered = ellipse(cx + rng.normal(0, 0.6), 72 + rng.normal(0, 0.6))
        model.append(np.clip(jittered + (4 * g * (1 - g) + 0.1) * noise, 0, 1).astype(np.float32))
        truth.append(g)
    return frames, np.array(truth), np.array(model)


def alpha_metrics(a, g):
    d = (a[1:] - a[:-1]) - (g[1:] - g[:-1])
    return {
        "dtssd": float(np.mean(np.sqrt((d**2).reshape(len(d), -1).mean(1))) * 1e2),  # RVM's form
        "flicker": float(np.abs(a[STILL] - a[: STILL.stop - 1]).mean() * 1e3),
        "mad": float(np.abs(a - g).mean() * 1e3),
        "moving_mad": float(np.abs(a[MOVING] - g[MOVING]).mean() * 1e3),
    }


def run(stab, frames, values):
    return np.array([stab(f, v) for f, v in zip(frames, values, strict=True)])


@pytest.mark.parametrize("speed", [200.0, 600.0])
def test_alpha_flickers_less_and_stays_as_accurate(speed):
    frames, truth, model = video(0, speed)
    stab = DenseStabilizer("alpha")
    steady = run(stab, frames, model)
    raw, out = alpha_metrics(model, truth), alpha_metrics(steady, truth)
    assert out["flicker"] <= 0.5 * raw["flicker"] and out["dtssd"] <= 0.8 * raw["dtssd"], (raw, out)
    assert out["mad"] <= 1.05 * raw["mad"] and out["moving_mad"] <= 1.15 * raw["moving_mad"], (raw, out)
    assert steady.dtype == np.float32 and steady.shape == model.shape and steady.min() >= 0 and steady.max() <= 1
    assert stab.resets == 0 and stab.ms_per_frame > 0


def test_a_cut_a_brightness_jump_and_a_reset_give_the_new_output_unchanged():
    frames, _, model = video(1)
    other, _, other_model = video(2)
    other = [np.ascontiguousarray(f[::-1, ::-1]) for f in other]  # another scene: other textures, other places
    stab = DenseStabilizer("alpha")
    for f, a in zip(frames[:10], model[:10], strict=True):
        stab(f, a)
    assert np.array_equal(stab(other[0], other_model[0]), other_model[0])  # a scene cut
    stab(other[1], other_model[1])
    brighter = np.clip(other[2].astype(int) + 60, 0, 255).astype(np.uint8)
    assert np.array_equal(stab(brighter, other_model[2]), other_model[2])  # the light went on
    stab(brighter, other_model[3])
    assert not np.array_equal(stab(brighter, other_model[4]), other_model[4])  # steady again: history used
    stab.reset()  # the caller's: a new person
    assert np.array_equal(stab(brighter, other_model[5]), other_model[5])
    assert stab.resets == 2


def labels_video(seed):
    """Five part classes as vertical bands that hold still, then slide; logits whose margin shrinks at the band
    boundaries, plus correlated noise: argmax flips along the boundaries."""
    rng = np.random.default_rng(seed)
    colours = rng.integers(40, 220, (5, 3))
    texture = cv2.GaussianBlur(rng.random((H, W)).astype(np.float32), (0, 0), 1.5)
    frames, truth, logits = [], [], []
    xx = np.arange(W, dtype=np.float32)
    for t in range(T):
        shift = 4.0 * min(max(t - 30, 0), 30)
        position = (xx + 200 - shift) / 52
        label = np.broadcast_to(np.floor(position).astype(int) % 5, (H, W))
        edge = np.minimum(position % 1, 1 - position % 1)  # 0 at a boundary
        img = colours[label] * (0.8 + 0.4 * np.roll(texture, int(shift), axis=1)[..., None])
        frames.append(np.clip(img, 0, 255).astype(np.uint8))
        margin = np.broadcast_to(np.clip(edge * 8, 0.2, 3.0), (H, W))
        onehot = np.eye(5, dtype=np.float32)[label] * margin[..., None]
        noise = cv2.GaussianBlur(rng.normal(0, 1, (H, W, 5)).astype(np.float32), (0, 0), 1.0) * 1.5
        logits.append(np.moveaxis(onehot + noise, -1, 0))
        truth.append(label)
    return frames, np.array(truth), np.array(logits)


def miou(labels, truth):
    ious = [((labels == c) & (truth == c)).sum() / max(((labels == c) | (truth == c)).sum(), 1) for c in range(5)]
    return float(np.mean(ious))


def test_part_labels_stop_flipping_at_boundaries_and_come_back_as_they_went_in():
    frames, truth, logits = labels_video(0)
    stab = DenseStabilizer("seg")
    steady = run(stab, frames, logits)
    assert steady.shape == logits.shape and steady.dtype == logits.dtype
    raw_labels, labels = logits.argmax(1), steady.argmax(1)
    flips = lambda lab: float((lab[STILL] != lab[: STILL.stop - 1]).mean())  # noqa: E731
    assert flips(labels) <= 0.2 * flips(raw_labels), (flips(raw_labels), flips(labels))
    assert miou(labels, truth) >= miou(raw_labels, truth) - 0.01
    # probabilities in, probabilities out; logits in, logits out (whose softmax sums to one)
    probabilities = np.exp(logits[0]) / np.exp(logits[0]).sum(0)
    fresh = DenseStabilizer("seg")
    fresh(frames[0], probabilities)
    out = fresh(frames[1], np.exp(logits[1]) / np.exp(logits[1]).sum(0))
    assert np.allclose(out.sum(0), 1, atol=1e-4) and out.min() >= 0


def test_normals_stay_unit_and_shimmer_less():
    frames, truth_alpha, _ = video(3)
    rng = np.random.default_rng(3)
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    base = np.stack([(xx - W / 2) / W, (yy - H / 2) / H, np.ones_like(xx)], -1)
    truth = base / np.linalg.norm(base, axis=-1, keepdims=True)
    noisy = []
    for _ in range(T):
        n = truth + cv2.GaussianBlur(rng.normal(0, 1, (H, W, 3)).astype(np.float32), (0, 0), 1.5) * 0.15
        noisy.append(n / np.linalg.norm(n, axis=-1, keepdims=True))
    noisy = np.array(noisy, np.float32)
    steady = run(DenseStabilizer("normal"), frames, noisy)
    assert np.allclose(np.linalg.norm(steady, axis=-1), 1, atol=1e-4)
    angle = lambda a, b: np.degrees(np.arccos(np.clip((a * b).sum(-1), -1, 1)))  # noqa: E731
    shimmer = lambda n: float(angle(n[STILL], n[: STILL.stop - 1]).mean())  # noqa: E731
    assert shimmer(steady) <= 0.5 * shimmer(noisy)
    assert angle(steady, truth).mean() <= 1.05 * angle(noisy, truth).mean()


def test_depth_follows_each_frames_own_scale_and_shimmers_less():
    frames, truth_alpha, _ = video(4)
    rng = np.random.default_rng(4)
    truth = 3.0 + np.linspace(0, 1, W, dtype=np.float32)[None] - 0.5 * truth_alpha  # a person in front of a wall
    scales, shifts = rng.uniform(0.8, 1.2, T), rng.uniform(-0.3, 0.3, T)  # per-frame depth: its own scale
    noise = np.array([cv2.GaussianBlur(rng.normal(0, 1, (H, W)).astype(np.float32), (0, 0), 1.5) * 0.05
                      for _ in range(T)])  # fmt: skip
    model = (scales[:, None, None] * (truth + noise) + shifts[:, None, None]).astype(np.float32)
    steady = run(DenseStabilizer("depth"), frames, model)
    # in the current frame's own scale: fit each output to the truth, the scale is that frame's
    fitted = [np.polyfit(truth[t].ravel(), steady[t].ravel(), 1)[0] for t in range(T)]
    assert np.allclose(fitted, scales, rtol=0.03)
    # and steadier: the error after undoing each frame's scale and shift
    undo = lambda d: (d - shifts[:, None, None]) / scales[:, None, None] - truth  # noqa: E731
    assert np.abs(undo(steady)[STILL]).mean() <= 0.6 * np.abs(undo(model)[STILL]).mean()


def test_kinds_are_checked():
    with pytest.raises(ValueError, match="unknown kind 'mask'"):
        DenseStabilizer("mask")
