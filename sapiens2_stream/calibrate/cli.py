"""The command line's `calibrate` verb (its parser here; OpenCV's solvers load only when it runs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import Sapiens2StreamError


def add_parser(sub) -> None:
    calibrate = sub.add_parser("calibrate", help="calibrate cameras from a board (Pose2Sim's Calib.toml)")
    kinds = calibrate.add_subparsers(dest="calibration", required=True)
    intrinsics = kinds.add_parser("intrinsics", help="each camera's focal length, principal point and distortion "
                                                     "from pictures or a video of a board")  # fmt: skip
    intrinsics.add_argument("--board", choices=("checkerboard", "charuco"), default="checkerboard")
    intrinsics.add_argument("--corners", metavar="COLSxROWS", help="checkerboard: its inner corners, e.g. 9x6")
    intrinsics.add_argument("--squares", metavar="COLSxROWS", help="charuco: its squares, e.g. 7x5")
    intrinsics.add_argument("--square", type=float, metavar="METRES", help="the side of a square, e.g. 0.025")
    intrinsics.add_argument("--marker", type=float, metavar="METRES", help="charuco: the side of a marker")
    intrinsics.add_argument("--dictionary", metavar="NAME", help="charuco: its ArUco dictionary, e.g. DICT_4X4_50")
    intrinsics.add_argument("--camera", action="append", required=True, metavar="NAME=PATH",
                            help="a camera's pictures (a file, folder or glob) or video; repeat for several")
    intrinsics.add_argument("--output", required=True, metavar="FILE",
                            help="the Calib.toml to write (updated in place when it exists)")
    intrinsics.add_argument("--max-views", type=int, default=40, metavar="N",
                            help="from a video: at most this many views, chosen far apart (default %(default)s)")
    intrinsics.set_defaults(func=cmd_calibrate_intrinsics)


def camera_specs(given: list[str]) -> dict[str, str]:
    """NAME=PATH pairs, each name once."""
    cameras: dict[str, str] = {}
    for item in given:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise Sapiens2StreamError(f"--camera {item!r}: expected NAME=PATH (e.g. left=calib/left*.jpg)")
        if name in cameras:
            raise Sapiens2StreamError(f"--camera {name}: given twice; every camera needs its own name")
        cameras[name] = path
    return cameras


def cmd_calibrate_intrinsics(args: argparse.Namespace) -> int:
    from .boards import board_from
    from .intrinsics import calibrate_intrinsics
    from .outputs import report_paths, write_intrinsics
    from .views import board_views

    board = board_from(args.board, args.corners, args.squares, args.square, args.marker, args.dictionary)
    cameras = camera_specs(args.camera)
    output = Path(args.output)
    if output.is_dir():
        raise Sapiens2StreamError(f"--output {output}: a folder; give the Calib.toml file to write")
    seen = {}
    for name, spec in cameras.items():
        views = board_views(spec, board, args.max_views)
        if not views.views:
            raise Sapiens2StreamError(f"camera {name}: {board.describe()} was not found in any of the "
                                      f"{views.looked_at} picture(s) of {spec} (check --corners: inner corners, "
                                      "where four squares meet)")  # fmt: skip
        result = calibrate_intrinsics(name, views.views, board, views.size)
        result.dropped = {**views.left_out, **result.dropped}
        kept = [v for v in views.views if v.label in result.view_rms_px]
        seen[name] = (kept, result)
    report = write_intrinsics(output, seen, board.describe())
    report_json, picture = report_paths(output)
    for name, cam in report["cameras"].items():
        dropped = f", {len(cam['dropped'])} left out" if cam["dropped"] else ""
        print(f"{name}: {cam['views']} views{dropped}; RMS {cam['rms_px']:.3f} px; fx {cam['fx']:.1f} "
              f"fy {cam['fy']:.1f} cx {cam['cx']:.1f} cy {cam['cy']:.1f} (± {cam['sigma']['fx']:.1f} px); "
              f"{cam['model']}; {cam['coverage']:.0%} of the picture covered")  # fmt: skip
    print(f"wrote {output}, {report_json.name}, {picture.name}", file=sys.stderr)
    return 0
