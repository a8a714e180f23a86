"""The command line's `kinematics` verb: OpenSim scaling and IK of the people a run put in metres."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from ..errors import Sapiens2StreamError
from .opensim_files import MODELS


def number(value: str | None, option: str, positive: bool = False) -> float | None:
    """An option's number (None when not given), or one line saying what is wrong with it."""
    if value is None:
        return None
    try:
        found = float(value)
    except ValueError:
        raise Sapiens2StreamError(f"{option} {value!r} is not a number") from None
    if not np.isfinite(found) or (positive and not found > 0):
        raise Sapiens2StreamError(f"{option} {value!r} must be a {'positive ' if positive else ''}finite number")
    return found


def track_ids(value: str) -> set[int]:
    try:
        return {int(v) for v in value.split(",") if v.strip()}
    except ValueError:
        raise Sapiens2StreamError(f"--tracks {value!r}: track ids separated by commas, such as 1,3") from None


def add_parser(sub) -> None:
    k = sub.add_parser("kinematics", help="OpenSim: a model scaled to each person of a run and inverse kinematics")
    k.add_argument("run", metavar="RUN_FOLDER",
                   help="a run's output folder with people in metres (a camera group's 3d/, or a camera's 3-D stage "
                        "with its floor)")  # fmt: skip
    k.add_argument("--output", metavar="DIR", help="where the files go (default RUN_FOLDER/kinematics)")
    k.add_argument("--model", choices=tuple(MODELS), default="simple",
                   help="Pose2Sim's OpenSim model: simple (no muscles) or full (default %(default)s)")  # fmt: skip
    k.add_argument("--mass", metavar="KG", default="70", help="the person's mass (default %(default)s)")
    k.add_argument("--height", metavar="M", help="the person's height, kept in the summary beside the scaled "
                                                 "model's (the segments are measured from the track)")  # fmt: skip
    k.add_argument("--tracks", metavar="IDS", help="only these track ids (comma-separated)")
    k.add_argument("--scale-frames", metavar="N", default="30", dest="scale_frames",
                   help="the model is scaled from the person's first N frames standing straight enough, as a live "
                        "run with kinematics.scale_frames does (default %(default)s)")  # fmt: skip
    k.add_argument("--start", metavar="S", help="from this time (seconds, as the run's timestamps)")
    k.add_argument("--end", metavar="S", help="to this time")
    k.set_defaults(func=cmd_kinematics)


def cmd_kinematics(args) -> int:
    from .run import kinematics

    mass, height = number(args.mass, "--mass", positive=True), number(args.height, "--height", positive=True)
    start, end = number(args.start, "--start"), number(args.end, "--end")
    frames = number(args.scale_frames, "--scale-frames", positive=True)
    summary = kinematics(Path(args.run), Path(args.output) if args.output else None, args.model, mass, height,
                         track_ids(args.tracks) if args.tracks else None, start, end, int(frames),
                         say=lambda line: print(line, file=sys.stderr))  # fmt: skip
    if not any("solved" in p for p in summary["people"].values()):
        raise Sapiens2StreamError(f"{args.run}: no person could be scaled (see above)")
    return 0
