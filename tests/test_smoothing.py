"""Keypoint smoothing against filterpy (the oracle), on trajectories with known truth, and the tracker's ids."""

import numpy as np
import pytest
from filterpy.common import Q_discrete_white_noise
from filterpy.kalman import KalmanFilter, rts_smoother

from sapiens2_stream.track import OnlineSmoother, Tracker, smooth_keypoints
from sapiens2_stream.track.smoothing import DEFAULTS


def filterpy_track(z, valid, times, q, r, v0):
    """One coordinate through filterpy: filtered positions, and RTS-smoothed ones (valid from frame 0)."""
    kf = KalmanFilter(dim_x=2, dim_z=1)
    kf.H, kf.R = np.array([[1.0, 0.0]]), np.array([[r]])
    kf.x, kf.P = np.array([[z[0]], [0.0]]), np.diag([r, v0])
    xs, ps, fs, qs = [kf.x.copy()], [kf.P.copy()], [np.eye(2)], [np.zeros((2, 2))]
    for t in range(1, len(z)):
        dt = times[t] - times[t - 1]
        kf.F, kf.Q = np.array([[1.0, dt], [0.0, 1.0]]), Q_discrete_white_noise(2, dt, q)
        kf.predict()
        if valid[t]:
            kf.update(z[t])
        xs.append(kf.x.copy())
        ps.append(kf.P.copy())
        fs.append(kf.F.copy())
        qs.append(kf.Q.copy())
    xs, ps = np.array(xs), np.array(ps)
    # filterpy's rts_smoother takes Fs[k] / Qs[k] as the step from k to k+1
    smoothed, *_ = rts_smoother(xs, ps, np.array(fs[1:] + fs[:1]), np.array(qs[1:] + qs[:1]))
    return xs[:, 0, 0], smoothed[:, 0, 0]


@pytest.fixture
def noisy():
    rng = np.random.default_rng(0)
    t_len, k = 80, 5
    times = np.cumsum(rng.uniform(1 / 40, 1 / 20, t_len))  # irregular frame times
    truth = 200 + 80 * np.sin(2 * np.pi * 0.5 * times)[:, None, None] + np.arange(k)[None, :, None] * [10, 20]
    kp = truth + rng.normal(0, 2.0, truth.shape)
    scores = rng.uniform(0.5, 1.0, (t_len, k))
    scores[rng.uniform(size=(t_len, k)) < 0.15] = 0.1  # some low-confidence frames
    scores[0] = 0.9
    return times, truth, kp, scores


@pytest.mark.parametrize("method", ["kalman", "rts"])
def test_equal_to_filterpy(noisy, method):
    times, _, kp, scores = noisy
    p = DEFAULTS["kalman"]
    ours = smooth_keypoints(kp, scores, times, method, min_score=0.3)
    for k in range(kp.shape[1]):
        for c in range(2):
            filtered, smoothed = filterpy_track(kp[:, k, c], scores[:, k] >= 0.3, times, p["q"], p["r"], p["v0"])
            expected = filtered if method == "kalman" else smoothed
            assert np.abs(ours[:, k, c] - expected).max() < 1e-8


def test_online_equals_offline_kalman(noisy):
    times, _, kp, scores = noisy
    smoother = OnlineSmoother("kalman", min_score=0.3)
    online = np.stack([smoother(7, t, kp[i], scores[i]) for i, t in enumerate(times)])
    assert np.abs(online - smooth_keypoints(kp, scores, times, "kalman")).max() < 1e-9
    smoother.drop(7)
    assert 7 not in smoother.state


def test_one_euro_matches_scalar_reference(noisy):
    """The vectorised filter against a direct transcription of Casiez et al. for one coordinate."""
    import math

    times, _, kp, _ = noisy
    min_cutoff, beta, d_cutoff = 1.0, 0.05, 1.0

    def alpha(cutoff, dt):
        return 1 / (1 + 1 / (2 * math.pi * cutoff) / dt)

    x_hat, dx_hat, expected = kp[0, 0, 0], 0.0, [kp[0, 0, 0]]
    for t in range(1, len(times)):
        dt = times[t] - times[t - 1]
        dx = (kp[t, 0, 0] - x_hat) / dt
        dx_hat = dx_hat + alpha(d_cutoff, dt) * (dx - dx_hat)
        x_hat = x_hat + alpha(min_cutoff + beta * abs(dx_hat), dt) * (kp[t, 0, 0] - x_hat)
        expected.append(x_hat)
    ours = smooth_keypoints(kp, None, times, "one_euro", min_cutoff=min_cutoff, beta=beta, d_cutoff=d_cutoff)
    assert np.abs(ours[:, 0, 0] - np.array(expected)).max() < 1e-9
    online = OnlineSmoother("one_euro", min_score=0.0)
    stepwise = np.stack([online(1, t, kp[i], np.ones(kp.shape[1])) for i, t in enumerate(times)])
    assert np.abs(stepwise - ours).max() < 1e-9


def jitter(x):
    """RMS of the second difference: frame-to-frame shake."""
    return float(np.sqrt(np.mean(np.diff(x, n=2, axis=0) ** 2)))


def lag_frames(estimate, truth):
    """Shift (in frames) that best aligns the estimate with the truth."""
    errors = [np.mean((estimate[s:] - truth[: len(truth) - s]) ** 2) for s in range(0, 10)]
    return int(np.argmin(errors))


def test_jitter_reduced_and_lag_small(noisy):
    """Noise of 2 px on a fast sinusoidal motion (up to 250 px/s), irregular frame times, all keypoints valid."""
    times, truth, kp, _ = noisy
    raw_err = np.abs(kp - truth).mean()
    numbers = {}
    for method in ("kalman", "rts", "one_euro"):
        s = smooth_keypoints(kp, None, times, method)
        numbers[method] = (jitter(s) / jitter(kp), np.abs(s - truth).mean() / raw_err, lag_frames(s, truth))
    print("jitter ratio, error ratio, lag (frames):", numbers)
    assert numbers["kalman"][0] < 0.8 and numbers["kalman"][1] < 1.0 and numbers["kalman"][2] <= 1
    assert numbers["rts"][0] < 0.5 and numbers["rts"][1] < 0.7 and numbers["rts"][2] == 0  # zero lag
    assert numbers["one_euro"][0] < 0.8


def test_low_score_frames_do_not_pull_the_track():
    times = np.arange(40) / 30
    truth = np.stack([100 + 50 * times, 200 - 20 * times], -1)[:, None]
    kp = truth.copy()
    scores = np.ones((40, 1))
    kp[20:23] += 80  # three wild detections...
    scores[20:23] = 0.05  # ...that the model itself doubted
    # Kalman and RTS predict through the gap; One Euro holds its last estimate (and lags a moving point by
    # about a pixel here), so it trails by the 5 px the point moves in the gap: far from the 80 px outliers.
    for method, tolerance in (("kalman", 1.0), ("rts", 1.0), ("one_euro", 8.0)):
        s = smooth_keypoints(kp, scores, times, method)
        assert np.abs(s - truth).max() < tolerance, method


# ------------------------------------------------------------------------------------------------ tracker


def walk(t, start, velocity, size=(40, 100)):
    return np.array([start[0] + velocity[0] * t, start[1] + velocity[1] * t, *size, 0.9], np.float32)


def test_crossing_and_occluded_people_keep_their_ids():
    """Two people cross (boxes overlap for several frames); one is hidden for 6 frames behind the other."""
    tracker = Tracker()
    ids_a, ids_b = set(), set()
    for i in range(60):
        t = i / 30
        a, b = walk(t, (20, 50), (150, 0)), walk(t, (320, 60), (-150, 0))
        dets = [a, b]
        if 30 <= i < 36:  # b is occluded: the detector misses it
            dets = [a]
        elif 27 <= i < 30 or 36 <= i < 39:
            dets = [a, np.concatenate([b[:4], [0.3]])]  # partly hidden: weak detection
        out = tracker.update(np.array(dets), t)
        for track_id, box, _ in out:
            (ids_a if abs(box[1] - a[1]) < abs(box[1] - b[1]) else ids_b).add(track_id)  # a walks 10 px higher
    assert ids_a == {1} and ids_b == {2}


def test_tracks_end_after_max_lost_and_carry_between_detections():
    tracker = Tracker()
    tracker.update(np.array([walk(0, (0, 0), (30, 0))]), 0.0)
    tracker.update(np.array([walk(0.1, (0, 0), (30, 0))]), 0.1)
    carried = tracker.carry(0.2)
    assert carried[0][0] == 1 and carried[0][1][0] == pytest.approx(6.0, abs=1e-4)  # moved on at 30 px/s
    assert tracker.carry(1.5) == [] and tracker.pop_ended() == [1]
    new = tracker.update(np.array([walk(0, (0, 0), (0, 0))]), 1.6)
    assert new[0][0] == 2  # a new person, a new id


@pytest.mark.parametrize("seed", range(6))
def test_a_jittery_walker_seen_in_bursts_keeps_its_id(seed):
    """A live source the models cannot keep up with: bursts of 4 frames at 25 frames/s with 0.3 s dropped between;
    a narrow box whose edges jitter by up to 3 px every frame (arms and legs). The velocity of a line through the
    recent centres carries the id across the gaps; one frame's difference, carried over 0.3 s, misses by tens of
    pixels (the tracker that used it gave 2-6 ids here)."""
    rng = np.random.default_rng(seed)
    tracker, ids = Tracker(), set()
    for burst in range(10):
        for k in range(4):
            t = burst * 0.42 + k * 0.04
            left, right = rng.uniform(-3, 3, 2)
            box = [20 + 70 * t - 10 + left, 50, 20 - left + right, 64, 0.9]
            ids |= {track_id for track_id, _, _ in tracker.update(np.array([box]), t)}
    assert ids == {1}


# ------------------------------------------------------------------------------------------- adaptive (IMM)

FPS = 30
TIMES = np.arange(300) / FPS


def walking(rng):
    """20 keypoints of a person walking at 80 px/s with a 10 px sway, 3 px of measurement noise."""
    truth = np.stack([100 + 80 * TIMES, 300 + 10 * np.sin(2 * np.pi * 0.8 * TIMES)], -1)[:, None]
    truth = truth + rng.normal(0, 30, (1, 20, 2))
    return truth, truth + rng.normal(0, 3, truth.shape)


def turning(rng):
    """The same at 600 px/s, reversing every half second (a triangle wave: instant turns)."""
    phase = TIMES % 1.0
    x = np.where(phase < 0.5, phase, 1.0 - phase) * 600
    truth = np.stack([100 + x, 300 + 0 * x], -1)[:, None] + rng.normal(0, 30, (1, 20, 2))
    return truth, truth + rng.normal(0, 3, truth.shape)


def rmse(estimate, truth):
    return float(np.sqrt(((estimate - truth)[10:] ** 2).mean()))  # after the first third of a second


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_adaptive_smooths_walking_hard_and_follows_fast_turns_at_once(seed):
    rng = np.random.default_rng(seed)
    truth, noisy = walking(rng)
    raw = rmse(noisy, truth)
    removed = {m: 1 - rmse(smooth_keypoints(noisy, None, TIMES, m), truth) / raw for m in ("kalman", "adaptive")}
    assert removed["adaptive"] >= 0.35 and removed["kalman"] < 0.3, removed  # the fixed filter: about a quarter
    truth, noisy = turning(rng)
    fixed, adapted = (smooth_keypoints(noisy, None, TIMES, m) for m in ("kalman", "adaptive"))
    assert rmse(adapted, truth) <= rmse(fixed, truth)  # no more lag than the fixed filter, in error or in frames
    assert lag_frames(adapted[:, :, 0], truth[:, :, 0]) <= lag_frames(fixed[:, :, 0], truth[:, :, 0])


def test_adaptive_lets_doubtful_keypoints_pull_less_and_ignores_those_under_the_threshold():
    rng = np.random.default_rng(3)
    truth, noisy = walking(rng)
    wild = noisy.copy()
    wild[150:153] += 60  # three detections 60 px off, that the model doubted
    frames = slice(150, 153)

    def run(method, score, min_score=0.3):
        scores = np.ones(noisy.shape[:2])
        scores[frames] = score
        return smooth_keypoints(wild, scores, TIMES, method, min_score=min_score)[frames]

    coast = run("adaptive", 0.0, min_score=1e-9)  # nothing measured there: the prediction alone
    prediction_error = np.abs(coast - truth[frames]).max()
    # under the threshold (0.3): not used at all, the estimate coasts on its motion
    assert np.array_equal(run("adaptive", 0.01), coast)
    # near-zero scores used (no threshold): they pull by less than the prediction is off by itself; the fixed
    # filter takes them at face value and follows them most of the way
    assert np.abs(run("adaptive", 0.05, min_score=0.0) - coast).max() < prediction_error
    assert np.abs(run("kalman", 0.05, min_score=0.0) - coast).max() > 3 * prediction_error
    # just over the threshold: taken with the variance r / score**2; a 60 px jump then reads as a turn, which it
    # follows, but less far than the fixed filter
    pulled = {m: np.abs(run(m, 0.35) - run(m, 0.0, min_score=1e-9)).max() for m in ("kalman", "adaptive")}
    assert pulled["adaptive"] < pulled["kalman"], pulled


def test_adaptive_online_equals_offline():
    rng = np.random.default_rng(4)
    _, noisy = turning(rng)
    scores = rng.uniform(0.2, 1.0, noisy.shape[:2])
    smoother = OnlineSmoother("adaptive", min_score=0.3)
    online = np.stack([smoother(7, t, noisy[i], scores[i]) for i, t in enumerate(TIMES)])
    assert np.abs(online - smooth_keypoints(noisy, scores, TIMES, "adaptive")).max() < 1e-9


def test_the_library_function_smooths_as_a_pipeline_does_by_default():
    """One default for one smoother: `smooth_keypoints()` and `OnlineSmoother()` without a method do what a pipeline
    without a `smoothing:` section does (adaptive, min_score 0.3), not the fixed Kalman filter."""
    from sapiens2_stream.runtime.pipeline_config import PipelineConfig

    rng = np.random.default_rng(5)
    _, noisy = turning(rng)
    scores = rng.uniform(0.2, 1.0, noisy.shape[:2])
    run = PipelineConfig().smoothing
    assert (run.method, run.min_score, run.params) == ("adaptive", 0.3, {})
    pipeline_like = smooth_keypoints(noisy, scores, TIMES, run.method, run.min_score, **run.params)
    assert np.array_equal(smooth_keypoints(noisy, scores, TIMES), pipeline_like)
    smoother = OnlineSmoother()
    online = np.stack([smoother(3, t, noisy[i], scores[i]) for i, t in enumerate(TIMES)])
    assert np.abs(online - pipeline_like).max() < 1e-9
    assert np.abs(smooth_keypoints(noisy, scores, TIMES, "kalman") - pipeline_like).max() > 0.1  # it is not kalman
