"""A person's OpenSim model scaled from their own track, then inverse kinematics frame by frame.

Scaling: each of the setup's measurements (torso, thigh, shank, ...) is the ratio of the person's marker distances
to the unscaled model's, over the frames where the person stands straight enough (hips and knees bent less than
`STRAIGHT_DEG`; the fastest tenth of frames left out, as moving markers smear), a trimmed mean (the
quarter of values at each end left out), left and right together (a person's sides are taken as equal). The
model's bodies are scaled by those factors and its mass spread as the generic model's (`Model.scale`).

IK: OpenSim's own solver (`InverseKinematicsSolver`, as the IK tool runs it, with the setup's coordinate tasks),
each frame warm-started from the last. A marker is weighted by the setup's weight times its keypoint's sureness;
a marker whose keypoint is unsure (under `MIN_SURE`) is left out of that frame; a frame with fewer than
`MIN_MARKERS` sure markers, or one the solver cannot fit, is not solved (NaN, with the reason). `TrackIK.solve`
takes any frames in time order, so a live stage can feed it as a run goes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .markers import NAMES
from .opensim_files import MODELS, coordinate_tasks, marker_weights, measurements

STRAIGHT_DEG = 75.0  # hips and knees within this of straight: a frame segment lengths are measured in (crouched,
# keypoints are found less well: Pose2Sim leaves out 90 degrees and more)
MIN_SURE = 0.3  # a keypoint less sure than this is left out of IK's frame
MIN_MARKERS = 8  # fewer sure markers in a frame: not solved
MIN_SCALE_FRAMES = 10  # fewer frames to measure a person in: the track is too short to scale


class TooShort(Exception):
    """The track cannot be scaled: too few frames where its segments can be measured (says why)."""


def angle_deg(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The angle at b of a-b-c, degrees (NaN where a point is unknown)."""
    u, v = a - b, c - b
    cos = np.einsum("...i,...i", u, v) / (np.linalg.norm(u, axis=-1) * np.linalg.norm(v, axis=-1))
    return np.degrees(np.arccos(np.clip(cos, -1, 1)))


def measuring_frames(points: np.ndarray, times: np.ndarray) -> np.ndarray:
    """The frames (mask over [T, M, 3] markers) a person's segments are measured in: standing straight enough, and
    not among the fastest tenth."""
    at = {n: points[:, i] for i, n in enumerate(NAMES)}
    bends = [180 - angle_deg(at[f"{s}Hip"], at[f"{s}Knee"], at[f"{s}Ankle"]) for s in "LR"]
    bends += [180 - angle_deg(at[f"{s}Shoulder"], at[f"{s}Hip"], at[f"{s}Knee"]) for s in "LR"]
    straight = np.all([np.nan_to_num(b, nan=0.0) <= STRAIGHT_DEG for b in bends], axis=0)
    pelvis = (at["LHip"] + at["RHip"]) / 2
    speed = np.r_[0.0, np.linalg.norm(np.diff(pelvis, axis=0), axis=-1) / np.maximum(np.diff(times), 1e-6)]
    fast = np.isfinite(speed) & (speed > np.nanpercentile(speed, 90)) if np.isfinite(speed).any() else False
    return straight & ~fast


def trimmed_mean(values: np.ndarray, cut: float = 0.25) -> float:
    values = np.sort(values[np.isfinite(values)])
    k = int(len(values) * cut)
    return float(values[k : len(values) - k].mean()) if len(values) > 2 * k else float("nan")


@dataclass
class Scaled:
    """A scaled model: where it is written and each measurement's factor (NaN: not measured, left at 1)."""

    path: Path
    factors: dict[str, float]
    frames: int  # frames it was measured in


def scale_model(opensim, folder: Path, model: str, points: np.ndarray, times: np.ndarray, mass: float,
                out: Path) -> Scaled:  # fmt: skip
    """The model `model` (simple or full) scaled to the person of markers [T, M, 3] (OpenSim frame, metres, NaN
    where unsure), written to `out`."""
    chosen = measuring_frames(points, times)
    if chosen.sum() < MIN_SCALE_FRAMES:
        raise TooShort(f"{int(chosen.sum())} frames standing straight enough to measure (needs {MIN_SCALE_FRAMES})")
    generic = load_model(opensim, folder, folder / MODELS[model])
    state = generic.initSystem()
    where = {m.getName(): m.getLocationInGround(state).to_numpy() for m in generic.getMarkerSet()}
    index = {n: i for i, n in enumerate(NAMES)}
    scale_set, factors = opensim.ScaleSet(), {}
    for m in measurements(folder):
        ratios = [trimmed_mean(np.linalg.norm(points[chosen, index[a]] - points[chosen, index[b]], axis=-1))
                  / np.linalg.norm(where[a] - where[b]) for a, b in m.pairs if a in index and b in index]  # fmt: skip
        factors[m.name] = factor = float(np.nanmean(ratios)) if np.isfinite(ratios).any() else float("nan")
        if not np.isfinite(factor):
            continue
        for body, axes in m.bodies.items():
            scale = opensim.Scale()
            scale.setSegmentName(body)
            scale.setScaleFactors(opensim.Vec3(*(factor if a in axes.split() else 1.0 for a in "XYZ")))
            scale.setApply(True)
            scale_set.cloneAndAppend(scale)
    if not np.isfinite([factors.get("torso", np.nan), factors.get("thigh", np.nan)]).all():
        raise TooShort("the torso or the thighs were never seen whole")
    generic.scale(state, scale_set, True, float(mass))
    generic.setName(out.stem)
    out.parent.mkdir(parents=True, exist_ok=True)
    generic.printToXML(str(out))
    return Scaled(out, factors, int(chosen.sum()))


def load_model(opensim, folder: Path, path: Path):
    """An OpenSim model with the COCO-133 marker set (its meshes found in the setup's Geometry folder)."""
    opensim.ModelVisualizer.addDirToGeometrySearchPaths(str(folder / "Geometry"))
    model = opensim.Model(str(path))
    if model.getMarkerSet().getSize() == 0:
        model.set_MarkerSet(opensim.MarkerSet(str(folder / "Markers_Coco133.xml")))
    return model


@dataclass
class Solved:
    """IK of a track: each coordinate per frame (degrees for rotations, metres for translations; NaN where not
    solved), the marker errors per frame (RMS and max, metres), and why a frame was not solved."""

    coordinates: list[str]
    rotational: list[bool]
    values: np.ndarray  # [T, C]
    errors: np.ndarray  # [T, 2]: rms, max
    unsolved: dict[int, str] = field(default_factory=dict)  # frame (row) -> reason


class TrackIK:
    """OpenSim's IK solver on one scaled model, frame by frame, each frame warm-started from the last solved."""

    def __init__(self, opensim, folder: Path, model_path: Path) -> None:
        self.opensim = opensim
        self.model = load_model(opensim, folder, model_path)
        self.state = self.model.initSystem()
        coords = self.model.getCoordinateSet()
        self.coords = [coords.get(i) for i in range(coords.getSize())]
        self.names = [c.getName() for c in self.coords]
        self.rotational = [c.getMotionType() == 1 for c in self.coords]  # Coordinate::Rotational
        self.weights = marker_weights(folder)
        self.held = coordinate_tasks(folder)

    def solve(self, times: np.ndarray, points: np.ndarray, sure: np.ndarray) -> Solved:
        """Markers [T, M, 3] (OpenSim frame, metres) with sureness [T, M] -> each frame's coordinates."""
        osim = self.opensim
        usable = np.isfinite(points).all(-1) & (sure >= MIN_SURE)
        table = osim.TimeSeriesTableVec3()
        table.setColumnLabels(list(NAMES))
        nan = osim.Vec3(np.nan, np.nan, np.nan)
        for t, row, ok in zip(times, points, usable, strict=True):
            table.appendRow(float(t), osim.RowVectorVec3([osim.Vec3(*map(float, p)) if u else nan
                                                          for p, u in zip(row, ok, strict=True)]))  # fmt: skip
        weight_set = osim.SetMarkerWeights()
        for name in NAMES:
            weight_set.cloneAndAppend(osim.MarkerWeight(name, self.weights.get(name, 1.0)))
        # the solver keeps references to these: they must live as long as it does (a temporary is freed under it)
        reference, held, targets = osim.MarkersReference(table, weight_set), osim.SimTKArrayCoordinateReference(), []
        for name, (weight, value) in self.held.items():  # the setup's coordinate tasks, as its IK tool adds them
            default = self.model.getCoordinateSet().get(name).getDefaultValue()
            constant = osim.Constant(default if value is None else value)
            targets.append((constant, osim.CoordinateReference(name, constant)))
            targets[-1][1].setWeight(weight)
            held.push_back(targets[-1][1])
        solver = osim.InverseKinematicsSolver(self.model, reference, held, float("inf"))
        solver.setAccuracy(1e-5)
        values = np.full((len(times), len(self.coords)), np.nan)
        errors = np.full((len(times), 2), np.nan)
        unsolved: dict[int, str] = {}
        assembled, applied = False, {n: self.weights.get(n, 1.0) for n in NAMES}
        for k, t in enumerate(times):
            if usable[k].sum() < MIN_MARKERS:
                unsolved[k] = f"{int(usable[k].sum())} sure markers (needs {MIN_MARKERS})"
                continue
            weights = {n: self.weights.get(n, 1.0) * float(min(s, 1.0)) for n, s in zip(NAMES, sure[k], strict=True)}
            if assembled:  # (the solver knows its markers once assembled; the first frame has the setup's weights)
                for name, weight in weights.items():
                    if weight != applied.get(name):  # a change makes the solver start afresh: only where needed
                        solver.updateMarkerWeight(name, weight)
            applied = weights
            self.state.setTime(float(t))
            try:
                self.fit(solver, assembled)
            except RuntimeError as e:  # OpenSim's exceptions arrive as RuntimeError
                unsolved[k] = f"the solver could not fit the model: {str(e).splitlines()[0][:160]}"
                assembled = False
                continue
            assembled = True
            values[k] = [c.getValue(self.state) for c in self.coords]
            found = osim.SimTKArrayDouble()
            solver.computeCurrentMarkerErrors(found)
            e = np.array([found.getElt(i) for i in range(found.size())])
            e = e[np.isfinite(e)]
            errors[k] = [np.sqrt(np.mean(e**2)), e.max()] if len(e) else np.nan
        values[:, self.rotational] = np.degrees(values[:, self.rotational])
        return Solved(self.names, self.rotational, values, errors, unsolved)

    def fit(self, solver, assembled: bool) -> None:
        """The frame's pose: tracked from the last one's, else (the first frame, after an unsolved one, or where
        tracking refuses: new marker weights can ask for it) assembled afresh."""
        if assembled:
            try:
                solver.track(self.state)
                return
            except RuntimeError:
                pass
        solver.assemble(self.state)
