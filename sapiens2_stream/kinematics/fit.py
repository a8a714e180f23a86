"""A person's OpenSim model scaled from their own track, then inverse kinematics frame by frame.

Scaling: each of the setup's measurements (torso, thigh, shank, ...) is the ratio of the person's marker distances
to the unscaled model's, over the person's first `scale_frames` frames standing straight enough (hips and knees
bent less than `STRAIGHT_DEG`: crouched, keypoints are found less well), a trimmed mean (the quarter of values at
each end left out), left and right together (a person's sides are taken as equal). The first frames, so that a
live run, which scales as soon as it has seen them, and the run's files give the same model. The model's bodies
are scaled by those factors and its mass spread as the generic model's (`Model.scale`). A body that more than one
measurement scales (the head: the torso's and the face's) takes the mean of all their ratios, as Pose2Sim merges
them (OpenSim alone would apply the first and drop the rest).

IK: OpenSim's own solver (`InverseKinematicsSolver`, as the IK tool sets it up, with the setup's coordinate
tasks), one frame at a time from the pose of the last solved frame. A marker is weighted by the setup's weight
times its keypoint's sureness; a marker whose keypoint is unsure (under `MIN_SURE`) is left out of that frame; a
frame with fewer than `MIN_MARKERS` sure markers, or one the solver cannot fit, is not solved (NaN, with the
reason).
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .markers import NAMES
from .opensim_files import MODELS, coordinate_tasks, marker_weights, measurements
from .starts import SIDES, Starts

STRAIGHT_DEG = 75.0  # hips and knees within this of straight: a frame segment lengths are measured in (crouched,
# keypoints are found less well: Pose2Sim leaves out 90 degrees and more)
MIN_SURE = 0.3  # a keypoint less sure than this is left out of IK's frame
MIN_MARKERS = 8  # fewer sure markers in a frame: not solved
MIN_SCALE_FRAMES = 10  # fewer frames to measure a person in: the track is too short to scale
ACCURACY, TRIAL_ACCURACY = 1e-5, 1e-4  # the solver's (Pose2Sim's IK setup's), and the fresh starts' trials'
RECENT, RECENT_MIN = 15, 5  # a frame's fit is doubted against the last 15 frames' (once there are 5)
DOUBT_RATIO, DOUBT_M, DOUBT_SPREAD = 1.15, 0.002, 4.0  # doubted: this much above their median, by this much
# (metres) at least, and by this many times their spread
DOUBT_BEYOND = np.radians(60)  # doubted too: a shoulder this far outside its ranges (turned past what a body can)
AS_WELL = (0.05, 0.001)  # solves within 5% (1 mm at least) of the best fit fit as well


class TooShort(Exception):
    """The track cannot be scaled: too few frames where its segments can be measured (says why)."""


def angle_deg(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The angle at b of a-b-c, degrees (NaN where a point is unknown)."""
    u, v = a - b, c - b
    cos = np.einsum("...i,...i", u, v) / (np.linalg.norm(u, axis=-1) * np.linalg.norm(v, axis=-1))
    return np.degrees(np.arccos(np.clip(cos, -1, 1)))


def standing(points: np.ndarray) -> np.ndarray:
    """Whether each frame of markers [T, M, 3] shows the person standing straight enough to be measured in (hips
    and knees bent less than `STRAIGHT_DEG`, where seen)."""
    at = {n: points[:, i] for i, n in enumerate(NAMES)}
    bends = [180 - angle_deg(at[f"{s}Hip"], at[f"{s}Knee"], at[f"{s}Ankle"]) for s in "LR"]
    bends += [180 - angle_deg(at[f"{s}Shoulder"], at[f"{s}Hip"], at[f"{s}Knee"]) for s in "LR"]
    return np.all([np.nan_to_num(b, nan=0.0) <= STRAIGHT_DEG for b in bends], axis=0)


def measuring_frames(points: np.ndarray, count: int) -> np.ndarray:
    """The frames a person is measured in: the first `count` frames standing straight enough (all there are, when
    fewer). A live run scales when it has seen them, so the files give the same model."""
    chosen = np.flatnonzero(standing(points))[:count]
    mask = np.zeros(len(points), bool)
    mask[chosen] = True
    return mask


def trimmed_mean(values: np.ndarray, cut: float = 0.25) -> float:
    values = np.sort(values[np.isfinite(values)])
    k = int(len(values) * cut)
    return float(values[k : len(values) - k].mean()) if len(values) > 2 * k else float("nan")


@dataclass
class Scaled:
    """A scaled model: where it is written, each measurement's factor (NaN: not measured, left at 1), and the
    model itself (so that IK need not read it back)."""

    path: Path
    factors: dict[str, float]
    frames: int  # frames it was measured in
    model: object = field(default=None, repr=False)  # the scaled opensim.Model


def scale_model(opensim, folder: Path, model: str, points: np.ndarray, mass: float, out: Path,
                frames: int) -> Scaled:  # fmt: skip
    """The model `model` (simple or full) scaled to the person of markers [T, M, 3] (OpenSim frame, metres, NaN
    where unsure) as measured in their first `frames` standing frames, written to `out`."""
    chosen = measuring_frames(points, frames)
    if chosen.sum() < MIN_SCALE_FRAMES:
        raise TooShort(f"{int(chosen.sum())} frames standing straight enough to measure (needs {MIN_SCALE_FRAMES})")
    generic = load_model(opensim, folder, folder / MODELS[model])
    state = generic.initSystem()
    where = {m.getName(): m.getLocationInGround(state).to_numpy() for m in generic.getMarkerSet()}
    index = {n: i for i, n in enumerate(NAMES)}
    factors: dict[str, float] = {}
    per_axis: dict[tuple[str, str], list[float]] = {}  # (body, axis) -> the pair ratios of every measurement on it
    for m in measurements(folder):
        ratios = [trimmed_mean(np.linalg.norm(points[chosen, index[a]] - points[chosen, index[b]], axis=-1))
                  / np.linalg.norm(where[a] - where[b]) for a, b in m.pairs if a in index and b in index]  # fmt: skip
        seen = [r for r in ratios if np.isfinite(r)]
        factors[m.name] = float(np.mean(seen)) if seen else float("nan")
        for body, axes in m.bodies.items():
            for axis in axes.split():
                per_axis.setdefault((body, axis), []).extend(seen)
    if not np.isfinite([factors.get("torso", np.nan), factors.get("thigh", np.nan)]).all():
        raise TooShort("the torso or the thighs were never seen whole")
    scale_set = opensim.ScaleSet()
    for body in dict.fromkeys(body for body, _ in per_axis):
        axes = [np.mean(per_axis[body, a]) if per_axis.get((body, a)) else 1.0 for a in "XYZ"]
        scale = opensim.Scale()
        scale.setSegmentName(body)
        scale.setScaleFactors(opensim.Vec3(*map(float, axes)))
        scale.setApply(True)
        scale_set.cloneAndAppend(scale)
    generic.scale(state, scale_set, True, float(mass))
    generic.setName(out.stem)
    out.parent.mkdir(parents=True, exist_ok=True)
    generic.printToXML(str(out))
    return Scaled(out, factors, int(chosen.sum()), generic)


def load_model(opensim, folder: Path, path: Path):
    """An OpenSim model with the COCO-133 marker set (its meshes found in the setup's Geometry folder)."""
    opensim.ModelVisualizer.addDirToGeometrySearchPaths(str(folder / "Geometry"))
    model = opensim.Model(str(path))
    if model.getMarkerSet().getSize() == 0:
        model.set_MarkerSet(opensim.MarkerSet(str(folder / "Markers_Coco133.xml")))
    return model


@dataclass
class FrameFit:
    """One frame's IK: the coordinates (degrees for rotations, metres for translations; None where not solved),
    the (RMS, largest) marker error in metres, why it was not solved, which start the kept solve began from
    (`last`: the last frame's pose; else a fresh start, `starts.Starts.fresh`), and whether the last pose's solve
    was doubted, so that fresh starts were tried."""

    values: np.ndarray | None
    errors: tuple[float, float]
    why: str | None = None
    start: str = "last"
    doubtful: bool = False


@dataclass
class Solved:
    """IK of a track: each coordinate per frame (degrees for rotations, metres for translations; NaN where not
    solved), the marker errors per frame (RMS and max, metres), why a frame was not solved, and per frame the start
    the kept solve began from and whether it was doubtful (fresh starts tried)."""

    coordinates: list[str]
    values: np.ndarray  # [T, C]
    errors: np.ndarray  # [T, 2]: rms, max
    unsolved: dict[int, str] = field(default_factory=dict)  # frame (row) -> reason
    starts: list[str] = field(default_factory=list)  # [T]: "last", a fresh start's name, or "" where not solved
    doubtful: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # [T]


@dataclass
class Attempt:
    """IK from one start: the coordinates it ended at (radians, metres, the shoulders read anatomically), its fit
    (the solver's own objective as a weighted RMS, metres), how far its shoulders lie outside their ranges
    (`Starts.beyond`, radians) and the (RMS, largest) marker error."""

    q: np.ndarray
    fit: float
    beyond: dict[str, float]  # side -> radians
    errors: tuple[float, float]

    @property
    def in_range(self) -> bool:
        return all(b <= DOUBT_BEYOND for b in self.beyond.values())


class TrackIK:
    """OpenSim's IK solver on one scaled model, one frame at a time, each from the pose the last solved frame left
    (a run's files and a live run call `frame` alike, so both give the same values).

    A frame whose fit is clearly worse than the track's usual one (`worse`: above the median of its recent frames'
    by more than they stray), or whose shoulder is turned past what a body can (`DOUBT_BEYOND`), or that the solver
    could not fit from the last pose, is doubtful: it is solved again from fresh starts (`starts.Starts`, likeliest
    first, until one is back to the usual fit within a body's ranges) and the solve kept is the best fitting
    (`keep`). So a solve that fell into a
    wrong basin, or is drifting into one, leaves it as soon as it shows. Where no start fits better, the worse fit
    is the track's new usual (a pose the model fits less well), so that the fresh starts cost only where a frame is
    in doubt, not on every frame of a pose that merely fits worse."""

    def __init__(self, opensim, folder: Path, model_path: Path, model=None) -> None:
        """IK of the model at `model_path` (or `model`, that model already loaded: a `Scaled` one)."""
        self.opensim = opensim
        self.model = load_model(opensim, folder, model_path) if model is None else model
        self.state = self.model.initSystem()
        coords = self.model.getCoordinateSet()
        self.coords = [coords.get(i) for i in range(coords.getSize())]
        self.names = [c.getName() for c in self.coords]
        self.rotational = np.array([c.getMotionType() == 1 for c in self.coords])  # Coordinate::Rotational
        self.weights = marker_weights(folder)
        self.starts = Starts(
            self.names,
            np.array([c.getDefaultValue() for c in self.coords]),
            np.array([(c.getRangeMin(), c.getRangeMax()) for c in self.coords]),
            self.rotational,
        )
        self.recent: deque[float] = deque(maxlen=RECENT)  # the kept fits of the last frames solved
        # The setup's coordinate tasks, as its IK tool adds them. Every frame's solver keeps references to these
        # (and to its marker reference): they must live as long as it does, or they are freed under it.
        self.held, self.targets, self.tasks = opensim.SimTKArrayCoordinateReference(), [], []
        for name, (weight, value) in coordinate_tasks(folder).items():
            value = coords.get(name).getDefaultValue() if value is None else value
            constant = opensim.Constant(value)
            target = opensim.CoordinateReference(name, constant)
            target.setWeight(weight)
            self.targets.append((constant, target))
            self.held.push_back(target)
            self.tasks.append((self.names.index(name), weight, value))

    def frame(self, t: float, points: np.ndarray, sure: np.ndarray) -> FrameFit:
        """Markers [M, 3] (OpenSim frame, metres) with sureness [M] at time `t` -> the frame's fit."""
        osim = self.opensim
        usable = np.isfinite(points).all(-1) & (sure >= MIN_SURE)
        if usable.sum() < MIN_MARKERS:
            return FrameFit(None, (np.nan, np.nan), f"{int(usable.sum())} sure markers (needs {MIN_MARKERS})")
        names = [n for n, u in zip(NAMES, usable, strict=True) if u]
        table = osim.TimeSeriesTableVec3()
        table.setColumnLabels(names)
        table.appendRow(float(t), osim.RowVectorVec3([osim.Vec3(*map(float, p)) for p in points[usable]]))
        weights = {n: self.weights.get(n, 1.0) * float(min(s, 1.0)) for n, s in zip(names, sure[usable], strict=True)}
        weight_set = osim.SetMarkerWeights()
        for name, weight in weights.items():
            weight_set.cloneAndAppend(osim.MarkerWeight(name, weight))
        reference = osim.MarkersReference(table, weight_set)  # kept by the solver: a local, never a temporary
        solver = osim.InverseKinematicsSolver(self.model, reference, self.held, float("inf"))
        solver.setAccuracy(ACCURACY)
        self.state.setTime(float(t))
        last = self.q()
        attempts: dict[str, Attempt] = {}
        failed = None
        try:
            attempts["last"] = self.attempt(solver, weights, None, last)  # from the state's pose: the last frame's
        except RuntimeError as e:  # OpenSim's exceptions arrive as RuntimeError
            failed = f"the solver could not fit the model: {str(e).splitlines()[0][:160]}"
        usual = self.usual()
        solved = attempts.get("last")
        worse = solved is None or (usual is not None and self.worse(solved.fit, usual))  # the track's first solve
        # is from the model's default pose already: Pose2Sim's fresh start
        turned = () if solved is None else tuple(side for side, b in solved.beyond.items() if b > DOUBT_BEYOND)
        doubtful = worse or bool(turned)
        if doubtful:
            solver.setAccuracy(TRIAL_ACCURACY)
            for name, start in self.starts.fresh(last, SIDES if worse else turned, whole=worse):
                try:
                    attempts[name] = self.attempt(solver, weights, start, last)
                except RuntimeError:
                    continue
                if usual is not None and attempts[name].in_range and not self.worse(attempts[name].fit, usual):
                    break  # back to the track's usual fit, within a body's ranges: the likelier starts are enough
            solver.setAccuracy(ACCURACY)
        if not attempts:
            self.set_q(last)
            return FrameFit(None, (np.nan, np.nan), failed, "", doubtful)
        kept = self.keep(attempts, last)
        if kept != "last":  # tried to the trials' accuracy: finished to the solver's from where it ended
            try:
                attempts[kept] = self.attempt(solver, weights, attempts[kept].q, last)
            except RuntimeError:
                kept = "last" if "last" in attempts else kept
        q = attempts[kept].q
        if kept != list(attempts)[-1] or not np.array_equal(q, self.q()):
            self.set_q(q)  # the same body in its anatomical reading: the next frame goes on from it
        if worse and kept == "last" and usual is not None:
            self.recent.clear()  # no start fits better: the track fits this much worse now, its new usual
        self.recent.append(attempts[kept].fit)
        values = q.copy()
        values[self.rotational] = np.degrees(values[self.rotational])
        return FrameFit(values, attempts[kept].errors, None, kept, doubtful)

    def usual(self) -> tuple[float, float] | None:
        """The track's usual fit and how far it strays (the median of its recent frames' and their spread, a
        scaled median absolute deviation), once it has `RECENT_MIN` frames to tell them by."""
        if len(self.recent) < RECENT_MIN:
            return None
        middle = statistics.median(self.recent)  # a few floats: the statistics module is cheaper than numpy here
        return middle, 1.4826 * statistics.median(abs(f - middle) for f in self.recent)

    @staticmethod
    def worse(fit: float, usual: tuple[float, float]) -> bool:
        """Whether a fit is clearly worse than the track's usual one: `DOUBT_RATIO` and `DOUBT_M` above it, and
        further than its frames stray (`DOUBT_SPREAD` times; noisier keypoints stray more)."""
        middle, spread = usual
        return fit > middle + max(middle * (DOUBT_RATIO - 1), DOUBT_M, DOUBT_SPREAD * spread)

    def keep(self, attempts: dict[str, Attempt], last: np.ndarray) -> str:
        """The start whose solve is kept. Of the solves that fit as well as the best (`AS_WELL`), those within the
        body's ranges where there are any, and of those the last pose's, else the one nearest it (a frame goes on
        from the one before it, and no other joint is moved to another of its equally good solutions)."""
        best = min(a.fit for a in attempts.values())
        good = {n: a for n, a in attempts.items() if a.fit <= best + max(AS_WELL[0] * best, AS_WELL[1])}
        good = {n: a for n, a in good.items() if a.in_range} or good
        if "last" in good:
            return "last"
        return min(good, key=lambda n: self.starts.distance(good[n].q, last))

    def attempt(self, solver, weights: dict[str, float], start: np.ndarray | None, last: np.ndarray) -> Attempt:
        """IK of this frame from `start` (None: the pose the state holds, the last frame's), read as the body's
        (`Starts.reading`, near the last frame's pose `last` where the shoulder's two readings are alike)."""
        if start is not None:
            self.set_q(start)
        solver.assemble(self.state)
        found = self.opensim.SimTKArrayDouble()
        solver.computeCurrentMarkerErrors(found)
        e = np.array([found.getElt(i) for i in range(found.size())])
        w = np.array([weights[solver.getMarkerNameForIndex(i)] for i in range(found.size())])
        q = self.starts.reading(self.q(), last)
        tasks = sum(weight * (q[i] - value) ** 2 for i, weight, value in self.tasks)
        fit = float(np.sqrt((np.sum(w * e**2) + tasks) / np.sum(w)))
        return Attempt(q, fit, self.starts.beyond(q), (float(np.sqrt(np.mean(e**2))), float(e.max())))

    def q(self) -> np.ndarray:
        return np.array([c.getValue(self.state) for c in self.coords])

    def set_q(self, q: np.ndarray) -> None:
        for c, value in zip(self.coords, q, strict=True):
            c.setValue(self.state, float(value), False)

    def solve(self, times: np.ndarray, points: np.ndarray, sure: np.ndarray) -> Solved:
        """Every frame of a track in order ([T, M, 3] markers, [T, M] sureness), each from the last solved."""
        values = np.full((len(times), len(self.coords)), np.nan)
        errors = np.full((len(times), 2), np.nan)
        unsolved: dict[int, str] = {}
        starts, doubtful = [], np.zeros(len(times), bool)
        for k, t in enumerate(times):
            fit = self.frame(t, points[k], sure[k])
            errors[k], doubtful[k] = fit.errors, fit.doubtful
            starts.append(fit.start if fit.values is not None else "")
            if fit.values is None:
                unsolved[k] = fit.why
            else:
                values[k] = fit.values
        return Solved(self.names, values, errors, unsolved, starts, doubtful)
