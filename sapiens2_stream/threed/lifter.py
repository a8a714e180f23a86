"""People in metres from one camera: 2-D keypoints lifted onto Sapiens2's metric pointmap.

    from sapiens2_stream.threed import Lifter
    lifter = Lifter(intrinsics=None)                 # a 3x3 matrix, or None: estimated from the pointmaps
    xyz, confidence = lifter(keypoints, scores, pointmap, track_ids, time_s, masks=None)

keypoints [P, 308, 2] pixels, scores [P, 308], pointmap [H, W, 3] metres in the camera frame (x right, y down,
z forward), track ids [P], masks [P, H, W] bool (each person's own pixels) or None; xyz [P, 308, 3] metres in the
camera frame, confidence [P, 308] in [0, 1]. The lifter keeps state per track between calls (`drop(track_id)` when
a track ends, `reset()` for a new video).

For each person, in this order:

1. **On the keypoint's ray.** Only a depth is estimated; the point is that depth along the ray through the 2-D
   keypoint (`rays`), so the 3-D keypoint always reprojects onto the 2-D one.
2. **Depth from the person's own pixels.** The median depth of the pixels around the keypoint (a window that grows
   with the person's size) that belong to the person: the mask when given, otherwise the pixels within
   `BODY_DEPTH_M` of the person's median depth, so a keypoint on the silhouette's edge never takes the background's.
3. **Inside the body.** Joints lie behind the skin by their group's half-thickness (`body.JOINT_DEPTH_M`); surface
   keypoints (face, hands, feet, landmarks) stay on it. What the pixel shows is the nearest thing on the ray, so
   this depth is where the joint is when nothing hides it, and a bound it cannot be in front of when something does.
4. **Bones and occlusion.** The twelve body joints' depths are solved together (`solve_depths`): near their
   measured depths, never in front of them, with the track's bone lengths (learned over time; an adult's typical
   ones, scaled to the person, before that) and near where the track's recent shape predicts. A joint whose pixel
   shows something else (another person, an object, its own other arm) has a measured depth too near for its bones;
   the solve moves it back along its ray, to where its bones put it, never to the occluder. Such a joint, and one
   not measured at all, is marked occluded: its confidence is halved. Face, hand and foot keypoints follow their
   anchor joint (`body.anchors`) when their pixel shows something nearer than it.
5. **One scale per person over time.** The pointmap's metric scale wobbles from frame to frame; bone lengths do not.
   Each frame's depths are divided by the median ratio of its visible bones to the track's learned ones: the whole
   person slides along the rays, unchanged in the picture.
6. **Smoothed in 3-D.** The adaptive (IMM) Kalman filter of the 2-D keypoints runs on each keypoint's depth.
"""

from __future__ import annotations

from collections import deque

import cv2
import numpy as np

from ..track.smoothing import AdaptiveKalman
from . import body
from .camera import IntrinsicsEstimate, rays
from .scale import FrameScale

BODY_DEPTH_M = 0.5  # pixels further than this from the person's median depth are not the person's (no mask given)
SAME_SURFACE_M = 0.03  # a limb this little in front of the torso's front, or behind it, is hidden by the torso
LAYER_M = 0.05  # a keypoint's window keeps its pixels within this of its near quarter
MIN_OWN = 0.3  # fewer of the window's pixels than this are the person's: the keypoint's pixel shows something else
MIN_SCORE = 0.3  # keypoints scored under this are not measured: they follow the skeleton
OCCLUDED_M = 0.04  # a joint the solve moved back further than this from its measured depth was hidden
ANCHOR_M = 0.2  # a face, hand or foot keypoint nearer than its anchor joint by more than this shows something else
LENGTH_HISTORY = 600  # frames of bone lengths a track learns from
RELEARN = 10  # frames between two medians of them (every frame for the first ten)
# the solve's spreads (metres): a measured depth, a bone's length, the track's prediction
IN_FRONT = 100.0  # the weight of a depth in front of what its pixel shows, against 1 behind it
DEPTH_SIGMA, BONE_SIGMA, PREDICTION_SIGMA, HIDDEN_SIGMA = 0.01, 0.015, 0.05, 0.1
DEPTH_FILTER = {"q_steady": 1e-2, "q_turn": 30.0, "r": 4e-4, "v0": 1.0, "switch": 0.005}  # metres, seconds
TYPICAL = np.array(list(body.BONE_LENGTH_M.values()))


class LiftedTrack:
    """One person's state over time: learned bone lengths, last depths and the depth filter."""

    def __init__(self) -> None:
        self.lengths: deque[np.ndarray] = deque(maxlen=LENGTH_HISTORY)  # [B] per frame, NaN where not seen
        self.depth: np.ndarray | None = None  # [308] the last output depths
        self.filter = AdaptiveKalman((body.NUM_KEYPOINTS,), **DEPTH_FILTER)
        self.time_s: float | None = None
        self._learned: np.ndarray | None = None

    def expected(self, lengths: np.ndarray) -> np.ndarray:
        """[B] the lengths this frame's bones should have: the learned ones once the track has some, else the
        typical adult's scaled to this person (the median ratio of this frame's bones to them)."""
        learned = self.learned()
        if len(self.lengths) >= 5 and np.isfinite(learned).sum() >= 6:
            return np.where(np.isfinite(learned), learned, TYPICAL * np.nanmedian(learned / TYPICAL))
        ratio = lengths / TYPICAL
        ratio = ratio[np.isfinite(ratio)]
        return TYPICAL * (np.median(ratio) if len(ratio) >= 3 else 1.0)

    def learned(self) -> np.ndarray:
        """[B] median bone lengths so far (NaN for a bone never seen), worked out again every `RELEARN` frames."""
        if self._learned is None or len(self.lengths) % RELEARN == 0 or len(self.lengths) < RELEARN:
            stack = np.array(self.lengths) if self.lengths else np.full((1, len(body.BONES)), np.nan)
            counts = np.isfinite(stack).sum(0)
            self._learned = row_medians(np.where(np.isfinite(stack), stack, np.inf).T, counts)
        return self._learned


class Lifter:
    """Per-person 3-D keypoints in metres from 2-D keypoints and a pointmap (see the module's docstring)."""

    def __init__(self, intrinsics: np.ndarray | None = None) -> None:
        self.given = None if intrinsics is None else np.asarray(intrinsics, np.float64)
        self.estimate = IntrinsicsEstimate()
        self.tracks: dict[int, LiftedTrack] = {}
        self.frame_scale = FrameScale()

    @property
    def intrinsics(self) -> np.ndarray | None:
        """The 3x3 matrix in use: the given one, else the run's estimate so far."""
        return self.given if self.given is not None else self.estimate.current

    def reset(self) -> None:
        self.estimate = IntrinsicsEstimate()
        self.frame_scale.reset()
        self.tracks.clear()

    def drop(self, track_id: int) -> None:
        self.tracks.pop(int(track_id), None)

    def __call__(
        self,
        keypoints: np.ndarray,
        scores: np.ndarray,
        pointmap: np.ndarray,
        track_ids,
        time_s: float,
        masks: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        keypoints = np.asarray(keypoints, np.float64)
        scores = np.clip(np.asarray(scores, np.float64), 0.0, 1.0)
        if self.given is None:
            self.estimate.update(pointmap)
        intrinsics = self.intrinsics
        people = len(keypoints)
        xyz = np.full((people, body.NUM_KEYPOINTS, 3), np.nan)
        confidence = np.zeros((people, body.NUM_KEYPOINTS))
        scale = self.frame_scale.update(pointmap, people_pixels(pointmap.shape[:2], keypoints, scores, masks))
        if intrinsics is None or people == 0:
            return xyz, confidence
        for p in range(people):
            track = self.tracks.setdefault(int(track_ids[p]), LiftedTrack())
            mask = None if masks is None else masks[p]
            centre = None if track.depth is None else np.nanmedian(track.depth[body.joint_ids()]) * (scale or 1.0)
            surface, own = surface_depths(keypoints[p], scores[p], pointmap, mask, centre)
            ray = rays(intrinsics, keypoints[p])
            depth, confidence[p] = self._person(track, keypoints[p], scores[p], surface / (scale or 1.0), own,
                                                scale is None, intrinsics, ray, time_s)  # fmt: skip
            xyz[p] = depth[:, None] * ray
        return xyz, confidence

    def _person(self, track: LiftedTrack, keypoints, scores, surface, own, by_bones: bool, intrinsics, ray,
                time_s) -> tuple:  # fmt: skip
        """One person's [308] depths and confidences from its surface depths (already divided by the frame's scale
        when the background gave one; `by_bones`: the person's bones must remove it instead); `ray`: the rays
        through its keypoints."""
        raw = surface + body.depth_priors()
        measured = np.isfinite(raw) & (scores >= MIN_SCORE) & (own >= MIN_OWN)
        raw = np.where(measured, raw, np.nan)
        predicted = None
        if track.depth is not None:  # the track's recent shape, moved to where its measured joints are now
            moved = (raw - track.depth)[body.joint_ids()]
            moved = moved[np.isfinite(moved)]
            predicted = track.depth + (np.median(moved) if len(moved) else 0.0)
        expected = track.expected(bone_lengths(raw, ray))
        joints = body.joint_ids()
        pred = None if predicted is None else predicted[joints]
        hidden = ~measured
        seen = raw[joints][np.isfinite(raw[joints])]
        far = far_side(keypoints, scores, expected, float(np.median(seen)) if len(seen) else np.nan, intrinsics)
        hidden[body.side_torso(far)] = True  # seen side-on: the far shoulder and hip show the near ones
        # which joints are hidden: moved back by this frame's bones alone (not by the track's history, which would
        # keep a joint hidden once it was), or behind the torso in the picture (only the far side's, side-on)
        solved = solve_depths(raw[joints], ray[joints], expected, None, hidden[joints])
        for _ in range(2):
            found = (solved - np.nan_to_num(raw[joints], nan=-np.inf) > OCCLUDED_M) | behind_torso(
                surface[joints], solved, keypoints[joints], ray[joints], intrinsics) & ~body.side_mask(
                body.other_side(far))  # fmt: skip
            if not (found & ~hidden[joints]).any():
                break
            hidden[joints] |= found
            solved = solve_depths(raw[joints], ray[joints], expected, None, hidden[joints])
        if pred is not None:  # where the hidden ones are: the bones and the track's recent shape together, the
            # visible ones held where they are seen
            solved = solve_depths(raw[joints], ray[joints], expected, pred, hidden[joints], False, solved)
        depth = raw.copy()
        depth[joints] = solved
        lengths = bone_lengths(np.where(hidden, np.nan, depth), ray)  # body joints only: the anchors leave them be
        track.lengths.append(lengths)
        depth = follow_anchors(depth, hidden, predicted)
        if by_bones:
            depth = rescaled(depth, lengths, track.learned(), len(track.lengths))
        confidence = scores * np.where(hidden, 0.5, 1.0) * np.isfinite(depth)
        dt = None if track.time_s is None else time_s - track.time_s
        valid = np.isfinite(depth)
        filtered = track.filter.step(np.where(valid, depth, 0.0), np.maximum(confidence, 1e-3), valid, dt)
        depth = np.where(track.filter.started, filtered, np.nan)
        track.time_s, track.depth = time_s, depth
        return depth, confidence


def people_pixels(shape: tuple[int, int], keypoints: np.ndarray, scores: np.ndarray, masks: np.ndarray | None):
    """[H, W] bool: the pixels that show people: their masks, else their keypoints' boxes widened by a fifth."""
    if masks is not None and len(masks):
        return np.asarray(masks, bool).any(0)
    out = np.zeros(shape, bool)
    for kp, sc in zip(keypoints, scores, strict=True):
        seen = kp[sc >= MIN_SCORE]
        if len(seen) < 2:
            continue
        low, high = seen.min(0), seen.max(0)
        pad = (high - low) * 0.2 + 4
        x0, y0 = np.maximum(np.floor(low - pad).astype(int), 0)
        x1, y1 = np.ceil(high + pad).astype(int)
        out[y0 : max(y1, 0), x0 : max(x1, 0)] = True
    return out


def surface_depths(
    keypoints: np.ndarray, scores: np.ndarray, pointmap: np.ndarray, mask: np.ndarray | None, centre: float | None
):
    """[308] the median depth of the person's own pixels around each keypoint, and [308] the share of the window's
    pixels that are the person's. Without a mask, the person's pixels are those near `centre` (the track's depth in
    the previous frame: someone passing in front does not capture it), else near the median depth at its
    keypoints."""
    h, w = pointmap.shape[:2]
    z = pointmap[..., 2]
    seen = scores >= MIN_SCORE
    pts = np.round(keypoints).astype(int)
    inside = seen & (pts[:, 0] >= 0) & (pts[:, 0] < w) & (pts[:, 1] >= 0) & (pts[:, 1] < h)
    if not inside.any():
        return np.full(len(keypoints), np.nan), np.zeros(len(keypoints))
    extent = np.ptp(keypoints[inside], axis=0).max() if inside.sum() > 1 else 40.0
    radius = int(np.clip(round(extent / 120), 1, 6))
    rows = np.flatnonzero(inside)  # only the keypoints in the picture and scored: the others have no depth
    offsets = np.arange(-radius, radius + 1)
    ys = np.clip(pts[rows, 1, None, None] + offsets[None, :, None], 0, h - 1)
    xs = np.clip(pts[rows, 0, None, None] + offsets[None, None, :], 0, w - 1)
    window = z[ys, xs].reshape(len(rows), -1)
    if mask is None:
        if centre is None or not np.isfinite(centre):
            centre = np.nanmedian(z[pts[inside, 1], pts[inside, 0]])
        own = np.abs(window - centre) <= BODY_DEPTH_M
    else:
        own = mask[ys, xs].reshape(len(rows), -1)
    own &= np.isfinite(window) & (window > 0)
    # one layer of them: pixels more than `LAYER_M` off the keypoint's own layer show something else beside it (the
    # floor beyond a toe, the other leg beside a knee). A surface keypoint's layer is the window's near quarter (it
    # is the nearest thing there); a joint's is its centre pixels' (a limb may pass in front of it nearby)
    values = np.where(own, window, np.inf)
    count = own.sum(1)
    near = np.sort(values, axis=1)[np.arange(len(rows)), np.maximum(count // 4, 0)]
    layer = near
    joints = np.flatnonzero(body.depth_priors()[rows] > 0)
    if len(joints):
        size = 2 * radius + 1
        centre_ids = [(radius + dy) * size + radius + dx for dy in (-1, 0, 1) for dx in (-1, 0, 1)]
        middle = row_medians(values[joints][:, centre_ids], own[joints][:, centre_ids].sum(1))
        layer[joints] = np.where(np.isfinite(middle), middle, near[joints])
    front = own & (np.abs(window - layer[:, None]) <= LAYER_M)
    depth, share = np.full(len(keypoints), np.nan), np.zeros(len(keypoints))
    depth[rows] = row_medians(np.where(front, window, np.inf), front.sum(1))
    share[rows] = own.mean(1)
    return depth, share


def row_medians(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The median of the first `counts[i]` values of each row once sorted (the others are +inf); NaN for none."""
    ordered = np.sort(values, axis=1)
    rows = np.arange(len(values))
    low = ordered[rows, np.maximum((counts - 1) // 2, 0)]
    high = ordered[rows, np.maximum(counts // 2, 0)]
    return np.where(counts > 0, (low + high) / 2, np.nan)


def bone_lengths(depth: np.ndarray, ray: np.ndarray) -> np.ndarray:
    """[B] this frame's bone lengths (NaN where a joint is missing)."""
    points = depth[:, None] * ray
    ends = body.bone_ids()
    return np.linalg.norm(points[ends[:, 0]] - points[ends[:, 1]], axis=1)


def rescaled(depth: np.ndarray, lengths: np.ndarray, learned: np.ndarray, frames: int) -> np.ndarray:
    """Depths divided by this frame's scale: the median ratio of its bone lengths to the track's learned ones."""
    ratio = lengths / learned
    ratio = ratio[np.isfinite(ratio)]
    if len(ratio) < 3 or frames < 5:
        return depth
    return depth / np.median(ratio)


def solve_depths(
    raw: np.ndarray,
    ray: np.ndarray,
    lengths: np.ndarray,
    predicted: np.ndarray | None,
    hidden: np.ndarray,
    robust: bool = True,
    initial: np.ndarray | None = None,
) -> np.ndarray:
    """[J] body joints' depths: a few Gauss-Newton steps on (a) each measured depth, strongly in front of it (nothing
    is in front of what the pixel shows) and, for a joint not known to be hidden, robustly behind it (Huber), (b)
    the bones' lengths, (c) the prediction, weakly and robustly, (d) for a hidden joint, its parent's depth plus its
    predicted offset from it, weakly: where a limb seen side-on leaves its bones no say. Joints with no measurement
    and no prediction start at the measured joints' median depth. `robust=False` once the hidden joints are known:
    the others' measured depths then hold (quadratic both ways). `initial`: where to start (an earlier solve's)."""
    ends = body.bone_index()
    have = np.isfinite(raw)
    if not have.any() and predicted is None:
        return raw
    start = np.nanmedian(raw) if have.any() else np.nanmedian(predicted)
    d = np.where(have, raw, predicted if predicted is not None else start)
    d = np.where(np.isfinite(d), d, start)
    if initial is not None:
        d = np.where(np.isfinite(initial), initial, d)
    elif predicted is None:  # a hidden joint starts behind a visible neighbour by its bone (not level with it)
        d = behind_neighbours(d, ray, lengths, hidden)
    raw0 = np.nan_to_num(raw)
    use_bones = np.isfinite(lengths)
    target = np.nan_to_num(lengths)
    a, b = ends[use_bones, 0], ends[use_bones, 1]
    child, parent = body.parent_index().T
    pulled = hidden[child]
    child, parent = child[pulled], parent[pulled]
    offset = 0.0 if predicted is None else np.nan_to_num(predicted[child] - predicted[parent])
    has_prediction = np.zeros(len(d), bool) if predicted is None else np.isfinite(predicted)
    pred0 = np.nan_to_num(predicted) if predicted is not None else np.zeros(len(d))
    for _ in range(8):
        # normal equations H step = -g of the weighted residuals (IRLS weights for the one-sided and Huber terms)
        r = (d - raw0) / DEPTH_SIGMA
        behind = np.minimum(1.0, 1.5 / np.maximum(np.abs(r), 1e-9)) if robust else 1.0
        w = np.where(r < 0, IN_FRONT, np.where(hidden, 0.0, behind)) * have
        rp = (d - pred0) / PREDICTION_SIGMA
        wp = np.minimum(1.0, 1.0 / np.maximum(np.abs(rp), 1e-9)) * has_prediction
        diagonal = w / DEPTH_SIGMA**2 + wp / PREDICTION_SIGMA**2 + 1e-6
        g = w * r / DEPTH_SIGMA + wp * rp / PREDICTION_SIGMA
        delta = d[a, None] * ray[a] - d[b, None] * ray[b]
        length = np.linalg.norm(delta, axis=1)
        unit = delta / np.maximum(length, 1e-9)[:, None]
        ja = np.einsum("bk,bk->b", unit, ray[a]) / BONE_SIGMA
        jb = -np.einsum("bk,bk->b", unit, ray[b]) / BONE_SIGMA
        rb = (length - target[use_bones]) / BONE_SIGMA
        rh = (d[child] - d[parent] - offset) / HIDDEN_SIGMA
        # every pair term (bones, hidden joints' pulls) adds J^T J to H and J^T r to g at its two joints
        at_first = np.concatenate([ja, np.full(len(child), 1 / HIDDEN_SIGMA)])
        at_second = np.concatenate([jb, np.full(len(child), -1 / HIDDEN_SIGMA)])
        first, second = np.concatenate([a, child]), np.concatenate([b, parent])
        rows, cols = np.concatenate([first, second]), np.concatenate([second, first])
        ji, jo = np.concatenate([at_first, at_second]), np.concatenate([at_second, at_first])
        pair = np.concatenate([rb, rh, rb, rh])
        size = len(d)
        h = np.diag(diagonal) + np.bincount(
            np.concatenate([rows * size + rows, rows * size + cols]), np.concatenate([ji * ji, ji * jo]), size * size
        ).reshape(size, size)
        g = g + np.bincount(rows, ji * pair, size)
        step = np.linalg.solve(h, -g)
        d = d + step
        if np.abs(step).max() < 5e-4:  # half a millimetre
            break
    return d


def far_side(keypoints: np.ndarray, scores: np.ndarray, lengths: np.ndarray, depth: float, intrinsics) -> str | None:
    """'left' or 'right': the side turned away from the camera when the body is seen side-on (its shoulders closer
    together in the picture than half their width), from which way the face points along the body's up; None
    otherwise. A body facing the picture's right with its head up turns its left side away."""
    ids = body.index()
    need = ("nose", "left_ear", "right_ear", "left_shoulder", "right_shoulder", "left_hip", "right_hip")
    if not np.isfinite(depth) or any(scores[ids[n]] < MIN_SCORE for n in need):
        return None
    shoulders = keypoints[ids["right_shoulder"]] - keypoints[ids["left_shoulder"]]
    width = lengths[body.BONES.index(("left_shoulder", "right_shoulder"))] * intrinsics[0, 0] / depth
    if np.linalg.norm(shoulders) > width / 2:
        return None
    up = (keypoints[ids["left_shoulder"]] + keypoints[ids["right_shoulder"]] - keypoints[ids["left_hip"]]
          - keypoints[ids["right_hip"]]) / 2  # fmt: skip
    face = keypoints[ids["nose"]] - (keypoints[ids["left_ear"]] + keypoints[ids["right_ear"]]) / 2
    turn = up[0] * face[1] - up[1] * face[0]
    return None if abs(turn) < 1e-6 else "left" if turn > 0 else "right"


def behind_neighbours(depth: np.ndarray, ray: np.ndarray, lengths: np.ndarray, hidden: np.ndarray) -> np.ndarray:
    """[J] depths with each hidden joint moved to the far crossing of its ray with the sphere of its bone's length
    around a visible neighbour (the first one found), where the ray meets it."""
    out = depth.copy()
    for bone, (i, j) in enumerate(body.bone_index()):
        for joint, other in ((i, j), (j, i)):
            if hidden[joint] and not hidden[other] and np.isfinite(lengths[bone]) and out[joint] == depth[joint]:
                centre = depth[other] * ray[other]
                a, b = ray[joint] @ ray[joint], ray[joint] @ centre
                disc = b * b - a * (centre @ centre - lengths[bone] ** 2)
                if disc > 0:
                    out[joint] = max(depth[joint], (b + np.sqrt(disc)) / a)
    return out


def behind_torso(surface: np.ndarray, depth: np.ndarray, keypoints: np.ndarray, ray: np.ndarray, intrinsics):
    """[J] limb joints that the torso hides: inside the torso's outline in the picture (the shoulders' and hips'
    outline, widened by the torso's depth as much as the body is seen side-on) with a surface depth no nearer than
    the torso's front; a limb in front of the torso shows its own skin, nearer than that by its thickness."""
    out = np.zeros(len(depth), bool)
    torso = body.torso_index()
    points = depth[torso, None] * ray[torso]
    if not np.isfinite(points).all():
        return out
    centre = points.mean(0)
    lateral = points[1] - points[0]  # right shoulder - left shoulder
    lateral /= max(np.linalg.norm(lateral), 1e-9)
    for k in body.limb_index():
        if not np.isfinite(surface[k]):
            continue
        view = ray[k] / np.linalg.norm(ray[k])
        side_on = abs(view @ lateral)
        extent = np.hypot(body.TORSO_HALF_WIDTH_M * side_on, body.TORSO_HALF_DEPTH_M * np.sqrt(1 - side_on**2))
        widen = body.TORSO_HALF_DEPTH_M * side_on * intrinsics[0, 0] / centre[2]
        outline = cv2.convexHull(keypoints[torso].astype(np.float32))
        inside = cv2.pointPolygonTest(outline, tuple(map(float, keypoints[k])), True) >= -widen
        if inside and surface[k] >= centre[2] - extent - SAME_SURFACE_M:
            out[k] = True
    return out


def follow_anchors(depth: np.ndarray, hidden: np.ndarray, predicted: np.ndarray | None) -> np.ndarray:
    """Face, hand and foot keypoints not measured, or nearer than their anchor joint by more than `ANCHOR_M` (their
    pixel shows something in front): at their anchor's depth plus their recent offset from it (never in front of
    what their pixel shows). `hidden` is updated in place."""
    anchor = body.anchors()
    own = anchor != np.arange(len(anchor))
    with np.errstate(invalid="ignore"):
        hidden |= own & (depth < depth[anchor] - ANCHOR_M)
    hidden &= own | hidden
    move = own & (hidden | ~np.isfinite(depth))
    offset = np.zeros(len(depth)) if predicted is None else np.nan_to_num(predicted - predicted[anchor])
    followed = depth[anchor] + offset
    out = depth.copy()
    out[move] = np.fmax(followed[move], depth[move])
    hidden |= move
    return out
