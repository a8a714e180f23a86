"""OpenSim kinematics as a run goes, for the stages that give it (a camera group's `group_kinematics`, a single
camera's `kinematics`): each person's frames kept, their model scaled once their first `scale_frames` standing
frames are seen (the model then kept; the frames before solved, unseen, so that the solver's pose has come the way
`sapiens2-stream kinematics` brings it on the run's files), then each frame solved from the pose of their last
(`fit.TrackIK`, the command's code). A resumed run takes the interrupted run's frames in first (`take` then
`catch_up`), so the values go on as they were. Each person's files at their end are the command's (`files`)."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .fit import TooShort, TrackIK, scale_model, standing
from .opensim_files import need_opensim, setup_dir
from .options import KinematicsConfig
from .run import Track, opensim_markers, solve_track

DIGITS = 4  # the records keep coordinates to 1e-4 degree (or metre)


@dataclass
class Person:
    """One person so far: their frames (for scaling and the files) and, once scaled, their solver."""

    times: list[float] = field(default_factory=list)
    keypoints: list[np.ndarray] = field(default_factory=list)  # world (Z up), metres, as the records keep them
    confidence: list[np.ndarray] = field(default_factory=list)
    standing: int = 0
    solver: TrackIK | None = None
    failed: str | None = None  # why they could not be scaled


class LiveKinematics:
    """The people of one stage (a source's, or a camera group's), by id."""

    def __init__(self, cfg: KinematicsConfig) -> None:
        self.cfg, self.opensim, self.setup = cfg, need_opensim(), setup_dir()
        self.work = Path(tempfile.mkdtemp(prefix="sapiens2-kinematics-"))  # the scaled models while the run goes
        self.people: dict[int, Person] = {}
        self.summary: dict[str, dict] = {}

    def take(self, person_id: int, time_s: float, keypoints: np.ndarray,
             confidence: np.ndarray) -> tuple[Person, np.ndarray, np.ndarray]:  # fmt: skip
        """One frame of a person (world keypoints [308, 3] with NaN, confidence [308]) into their frames, and their
        standing count while they are not yet scaled: the person, their markers and each marker's sureness."""
        seen = self.people.setdefault(person_id, Person())
        points, sure = opensim_markers(keypoints, confidence)
        seen.times.append(time_s)
        seen.keypoints.append(keypoints)
        seen.confidence.append(confidence)
        if seen.solver is None and seen.failed is None:
            seen.standing += int(standing(points[None])[0])
        return seen, points, sure

    def __call__(self, person_id: int, time_s: float, keypoints: np.ndarray,
                 confidence: np.ndarray) -> tuple[dict | None, str | None, str | None]:  # fmt: skip
        """A person's frame solved: ({coordinate: value}, None, doubt), or (None, why not, None). `doubt` is None
        where the solve from their last pose was not doubted, else the start whose solve was kept (`last`, or a
        fresh start's name), as the command's marker-error file says."""
        seen, points, sure = self.take(person_id, time_s, keypoints, confidence)
        if seen.solver is None and seen.failed is None and seen.standing >= self.cfg.scale_frames:
            self.scale(person_id, seen, solved=len(seen.times) - 1)
        if seen.solver is None:
            return None, seen.failed or f"scaling: {seen.standing} of {self.cfg.scale_frames} standing frames", None
        fit = seen.solver.frame(time_s, points, sure)
        if fit.values is None:
            return None, fit.why, None
        values = dict(zip(seen.solver.names, np.round(fit.values, DIGITS).tolist(), strict=True))
        return values, None, fit.start if fit.doubtful else None

    def catch_up(self) -> None:
        """After the interrupted run's frames were taken in (`take`): whoever had enough standing frames is scaled
        and solved through them (the same model from the same frames), so their next frame starts from the pose
        their last one left, as it did."""
        for person_id, seen in self.people.items():
            if seen.solver is None and seen.standing >= self.cfg.scale_frames:
                self.scale(person_id, seen, solved=len(seen.times))

    def scale(self, person_id: int, seen: Person, solved: int) -> None:
        """The person's model from their frames so far, and their first `solved` frames solved; where it cannot be
        made, why (said with every frame after, never tried again)."""
        points, sure = opensim_markers(np.array(seen.keypoints), np.array(seen.confidence))
        path = self.work / f"person_{person_id:04d}_scaled.osim"
        try:
            scaled = scale_model(self.opensim, self.setup, self.cfg.model, points, self.cfg.mass_kg, path,
                                 self.cfg.scale_frames)  # fmt: skip
        except TooShort as e:
            seen.failed = f"not scaled: {e}"
            return
        seen.solver = TrackIK(self.opensim, self.setup, scaled.path, scaled.model)
        for k in range(solved):  # not told: written already; so that each later frame starts from the pose its
            # predecessor left, as the command solves the run's files
            seen.solver.frame(seen.times[k], points[k], sure[k])

    def files(self, person_id: int, out: Path, label: str = "3d") -> dict:
        """The person's files in `out`, as `sapiens2-stream kinematics` writes them from the run's files (and
        forgotten here); their summary."""
        seen = self.people.pop(person_id)
        track = Track(label, person_id, np.array(seen.times), np.array(seen.keypoints), np.array(seen.confidence))
        try:
            done = solve_track(self.opensim, self.setup, track, out, self.cfg.model, self.cfg.mass_kg,
                               self.cfg.scale_frames)  # fmt: skip
        except TooShort as e:
            done = {"frames": len(seen.times), "skipped": str(e)}
        self.summary[f"person {person_id}"] = done
        return done

    def close(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)
