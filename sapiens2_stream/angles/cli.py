"""The command line's `angles` verb: a run's angles again, with other settings, without its models."""

from __future__ import annotations

import sys
from pathlib import Path

from ..config import from_dict
from ..errors import Sapiens2StreamError
from .options import AnglesConfig


def add_parser(sub) -> None:
    angles = sub.add_parser("angles", help="joint angles again from a run's files (2-D, 3-D, gait), other settings")
    angles.add_argument("run", metavar="RUN_FOLDER", help="a run's output folder (its results.jsonl, world.json, "
                                                          "3d/keypoints_3d.jsonl)")  # fmt: skip
    angles.add_argument("--output", metavar="DIR", help="where the angles/ folders go (default: beside each source's "
                                                        "results, RUN_FOLDER/.../angles)")  # fmt: skip
    angles.add_argument("--side", choices=("auto", "right", "left", "front", "back"), help="the side seen (2-D)")
    angles.add_argument("--filter", choices=("butterworth", "none"))
    angles.add_argument("--cutoff-hz", type=float, dest="cutoff_hz")
    angles.add_argument("--order", type=int)
    angles.add_argument("--min-score", type=float, dest="min_score")
    angles.add_argument("--no-plots", action="store_false", dest="plots", default=None)
    angles.add_argument("--no-gait", action="store_false", dest="gait", default=None)
    angles.set_defaults(func=cmd_angles)


def cmd_angles(args) -> int:
    from .recompute import recompute_run

    given = {k: getattr(args, k) for k in ("side", "filter", "cutoff_hz", "order", "min_score", "plots", "gait")}
    cfg = from_dict(AnglesConfig, {"enabled": True, **{k: v for k, v in given.items() if v is not None}}, "angles")
    done = recompute_run(Path(args.run), Path(args.output) if args.output else None, cfg)
    for s in done:
        print(f"{s['source']}: {len(s['tracks'])} tracks, {s['files']} files, {s['gait_events']} gait events",
              file=sys.stderr)  # fmt: skip
    if not any(s["tracks"] for s in done):
        raise Sapiens2StreamError(f"{args.run}: nobody with keypoints in the run's results")
    return 0
