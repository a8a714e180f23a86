"""OpenSim kinematics of a calibrated camera group's people as the run goes (`kinematics:`): after group_angles,
before write_3d, on the group stages' own thread (never a camera's writer).

Each person is scaled once their first `scale_frames` standing frames are seen (the model then kept; the frames
before are then solved, unseen, so that the solver's pose has come the way the command's does), and from then on
solved frame by frame from the pose of their last frame (`kinematics.fit.TrackIK`, the same code as
`sapiens2-stream kinematics`, which solves a track from its first frame). Each moment's person gets `kinematics`
({coordinate: degrees, pelvis translations in metres}), or null with `kinematics_why`; the records are what
OUTPUT/3d/keypoints_3d.jsonl and MQTT TOPIC/3d carry. At the end of the run each person's files are written to
OUTPUT/kinematics/ as the command writes them from the run's files.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...io.records import RecordedMoment, RecordedMomentPerson
from ...kinematics.fit import TooShort, TrackIK, scale_model, standing
from ...kinematics.opensim_files import need_opensim, setup_dir
from ...kinematics.options import KinematicsConfig
from ...kinematics.run import Track, opensim_markers, solve_track
from ..live_mocap import Moment
from .base import GroupStage, register_stage
from .context import GroupContext

DIGITS = 4  # the records keep coordinates to 1e-4 degree (or metre)


@dataclass
class Person:
    """One person of the group so far: their frames (for scaling and the files) and, once scaled, their solver."""

    times: list[float] = field(default_factory=list)
    keypoints: list[np.ndarray] = field(default_factory=list)  # world, as the records keep them
    confidence: list[np.ndarray] = field(default_factory=list)
    standing: int = 0
    solver: TrackIK | None = None
    failed: str | None = None  # why it could not be scaled


@dataclass
class GroupKinematicsState:
    cfg: KinematicsConfig
    opensim: object
    folder: Path  # Pose2Sim's OpenSim_Setup
    out: Path  # OUTPUT/kinematics
    work: Path  # the scaled models while the run goes
    people: dict[int, Person] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)


@register_stage("group_kinematics")
class GroupKinematics(GroupStage):
    """A camera group's people scaled and solved by OpenSim as their moments come."""

    section, doc = "kinematics", "a camera group's people: an OpenSim model scaled to each, IK in each moment"
    Options = KinematicsConfig
    files_off = {"files": False}

    def enabled(self, options: KinematicsConfig, ctx: GroupContext) -> bool:
        return bool(options) and len(ctx.group) >= 2

    def check(self, options: KinematicsConfig, ctx: GroupContext) -> None:
        if options:
            need_opensim()
            setup_dir()

    def open(self, options: KinematicsConfig, ctx: GroupContext, emit) -> GroupKinematicsState:
        work = Path(tempfile.mkdtemp(prefix="sapiens2-kinematics-"))
        return GroupKinematicsState(options, need_opensim(), setup_dir(), ctx.out_dir / "kinematics", work)

    def resume(self, state: GroupKinematicsState, moments: list[RecordedMoment]) -> None:
        """The interrupted run's frames taken in; whoever had enough standing frames is scaled and solved through
        them (the same model from the same frames), so the next frame starts from their last pose as it did."""
        for recorded in moments:
            for person in recorded.people:
                self.take(state, recorded.time, person)
        for person_id, seen in state.people.items():
            if seen.solver is None and seen.standing >= state.cfg.scale_frames:
                self.scale(state, person_id, seen, solved=len(seen.times))

    def take(self, state: GroupKinematicsState, time_s: float,
             person: RecordedMomentPerson) -> tuple[Person, np.ndarray, np.ndarray]:  # fmt: skip
        """One moment's person into their frames (and standing count while not yet scaled): the person, their
        markers and each marker's sureness."""
        seen = state.people.setdefault(person.id, Person())
        points, sure = opensim_markers(person.keypoints_3d, person.confidence)
        seen.times.append(time_s)
        seen.keypoints.append(person.keypoints_3d)
        seen.confidence.append(person.confidence)
        if seen.solver is None and seen.failed is None:
            seen.standing += int(standing(points[None])[0])
        return seen, points, sure

    def __call__(self, state: GroupKinematicsState, moment: Moment) -> None:
        time_s = moment.recorded.time
        for recorded, person in zip(moment.recorded.people, moment.record["people"], strict=True):
            seen, points, sure = self.take(state, time_s, recorded)
            if seen.solver is None and seen.failed is None and seen.standing >= state.cfg.scale_frames:
                self.scale(state, recorded.id, seen, solved=len(seen.times) - 1)
            values, why = None, seen.failed or f"scaling: {seen.standing} of {state.cfg.scale_frames} standing frames"
            if seen.solver is not None:
                values, _, why = seen.solver.frame(time_s, points, sure)
            rounded = None if values is None else np.round(values, DIGITS).tolist()
            person["kinematics"] = None if values is None else dict(zip(seen.solver.names, rounded, strict=True))
            if values is None:
                person["kinematics_why"] = why

    def scale(self, state: GroupKinematicsState, person_id: int, seen: Person, solved: int) -> None:
        """The person's model from their frames so far, and their first `solved` frames solved; where it cannot be
        made, why (said with every frame after, never tried again)."""
        points, sure = opensim_markers(np.array(seen.keypoints), np.array(seen.confidence))
        path = state.work / f"person_{person_id:04d}_scaled.osim"
        try:
            scaled = scale_model(state.opensim, state.folder, state.cfg.model, points, state.cfg.mass_kg, path,
                                 state.cfg.scale_frames)  # fmt: skip
        except TooShort as e:
            seen.failed = f"not scaled: {e}"
            return
        seen.solver = TrackIK(state.opensim, state.folder, scaled.path)
        for k in range(solved):  # the frames before, solved (not told: written already) so that from here on each
            # frame starts from the pose its predecessor left, as the command solves the run's files
            seen.solver.frame(seen.times[k], points[k], sure[k])

    def close(self, state: GroupKinematicsState) -> None:
        """Each person's files, as `sapiens2-stream kinematics` writes them from the run's files."""
        try:
            for person_id, seen in sorted(state.people.items() if state.cfg.files else ()):
                track = Track("3d", person_id, np.array(seen.times), np.array(seen.keypoints),
                              np.array(seen.confidence))  # fmt: skip
                try:
                    state.summary[f"person {person_id}"] = solve_track(
                        state.opensim, state.folder, track, state.out, state.cfg.model, state.cfg.mass_kg,
                        state.cfg.scale_frames,
                    )
                except TooShort as e:
                    state.summary[f"person {person_id}"] = {"frames": len(seen.times), "skipped": str(e)}
        finally:
            shutil.rmtree(state.work, ignore_errors=True)

    def summary(self, state: GroupKinematicsState) -> dict:
        return {"kinematics": {"folder": str(state.out), "people": state.summary}}
