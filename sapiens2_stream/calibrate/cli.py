"""The command line's `calibrate` verb (its parser here; OpenCV's solvers load only when it runs)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from ..errors import Sapiens2StreamError

DISAGREE_PX = 5.0  # a camera whose boards reproject worse than this after the adjustment saw other moments


def add_parser(sub, run_video: Callable[..., Path] | None = None) -> None:
    """`run_video(video, pipeline, folder, device, progress) -> folder`: a video through a pose pipeline into a run
    folder (`calibrate people` from videos; the runtime sits above calibration, so the command line hands it in)."""
    calibrate = sub.add_parser("calibrate", help="calibrate cameras from a board (Pose2Sim's Calib.toml)")
    kinds = calibrate.add_subparsers(dest="calibration", required=True)
    intrinsics = kinds.add_parser("intrinsics", help="each camera's focal length, principal point and distortion "
                                                     "from pictures or a video of a board")  # fmt: skip
    add_board_options(intrinsics)
    intrinsics.add_argument(
        "--max-views",
        type=int,
        default=40,
        metavar="N",
        help="from a video: at most this many views, chosen far apart (default %(default)s)",
    )
    intrinsics.set_defaults(func=cmd_calibrate_intrinsics)
    extrinsics = kinds.add_parser("extrinsics", help="where the cameras are, from a board they saw at the same "
                                                     "moments (the n-th picture of each camera)")  # fmt: skip
    add_board_options(extrinsics)
    extrinsics.add_argument(
        "--intrinsics",
        metavar="FILE",
        help="a Calib.toml with the cameras' intrinsics, held as they are (default: solved "
        "from the same views and refined together with the rig)",
    )
    extrinsics.add_argument("--floor-from-board", type=int, metavar="N",
                            help="the picture (from 0) whose board lies on the floor: the world's origin, Z up "
                                 "(default: the first seen by the most cameras)")  # fmt: skip
    extrinsics.add_argument("--sync", choices=("auto", "audio", "none"), default="auto",
                            help="videos: each one's time offset from its soundtrack (a clap; auto: where every "
                                 "video has a clear one), or the videos taken as started together (none); default "
                                 "%(default)s")  # fmt: skip
    extrinsics.set_defaults(func=cmd_calibrate_extrinsics, max_views=10**6)
    people = kinds.add_parser("people", help="where the cameras are, from a person walking through the room")
    people.add_argument("--camera", action="append", required=True, metavar="NAME=VIDEO|RUN_FOLDER",
                        help="a camera's video (run through --pipeline) or run (its output folder, results.jsonl "
                             "with the pose model's keypoints); one take: the first camera's clock and people are "
                             "the reference")  # fmt: skip
    people.add_argument(
        "--pipeline",
        metavar="YAML",
        help="the pose pipeline that runs the videos (its detector and "
        "models.pose; a file detector without a path reads each video's own VIDEO.truth.json or "
        "VIDEO.det.txt); their runs go to OUTPUT_runs/NAME/",
    )
    people.add_argument("--device", default="auto", help="for the videos' pose runs (default %(default)s)")
    people.add_argument("--no-progress", action="store_true")
    people.add_argument(
        "--intrinsics",
        required=True,
        metavar="FILE",
        help="a Calib.toml with every camera's intrinsics (calibrate intrinsics)",
    )
    people.add_argument(
        "--height",
        required=True,
        type=float,
        metavar="METRES",
        help="the person's standing height, floor to crown: the scale",
    )
    people.add_argument(
        "--track",
        type=int,
        metavar="ID",
        help="the person whose height is --height, where several "
        "are seen (their track id in the first camera's run; the others' tracks are matched)",
    )
    people.add_argument(
        "--refine-focal",
        action="store_true",
        help="solve each camera's focal length too (from the intrinsics' as the start; principal "
        "point and distortion kept): for lenses whose focal length drifted since",
    )
    people.add_argument("--sync", choices=("motion", "none"), default="motion",
                        help="each camera's time offset: found from the people's movement where it is clear (motion), "
                             "or the clocks taken as they are (none); default %(default)s")  # fmt: skip
    people.add_argument(
        "--output", required=True, metavar="FILE", help="the Calib.toml to write (updated in place when it exists)"
    )
    people.set_defaults(func=cmd_calibrate_people, run_video=run_video)


def add_board_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--board", choices=("checkerboard", "charuco"), default="checkerboard")
    p.add_argument("--corners", metavar="COLSxROWS", help="checkerboard: its inner corners, e.g. 9x6")
    p.add_argument("--squares", metavar="COLSxROWS", help="charuco: its squares, e.g. 7x5")
    p.add_argument("--square", type=float, metavar="METRES", help="the side of a square, e.g. 0.025")
    p.add_argument("--marker", type=float, metavar="METRES", help="charuco: the side of a marker")
    p.add_argument("--dictionary", metavar="NAME", help="charuco: its ArUco dictionary, e.g. DICT_4X4_50")
    p.add_argument(
        "--camera",
        action="append",
        required=True,
        metavar="NAME=PATH",
        help="a camera's pictures (a file, folder or glob) or video; repeat for several",
    )
    p.add_argument(
        "--output", required=True, metavar="FILE", help="the Calib.toml to write (updated in place when it exists)"
    )


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


def board_and_views(args: argparse.Namespace, clocks: dict | None = None) -> tuple:
    """The board, each camera's views of it (name -> Views; a video's at its `clocks` moments, when given) and the
    output path, every bad part said in one line."""
    from .boards import board_from
    from .views import board_views

    board = board_from(args.board, args.corners, args.squares, args.square, args.marker, args.dictionary)
    cameras = camera_specs(args.camera)
    output = Path(args.output)
    if output.is_dir():
        raise Sapiens2StreamError(f"--output {output}: a folder; give the Calib.toml file to write")
    seen = {}
    for name, spec in cameras.items():
        views = board_views(spec, board, args.max_views, (clocks or {}).get(name))
        if not views.views:
            raise Sapiens2StreamError(f"camera {name}: {board.describe()} was not found in any of the "
                                      f"{views.looked_at} picture(s) of {spec} (check --corners: inner corners, "
                                      "where four squares meet)")  # fmt: skip
        seen[name] = views
    return board, seen, output


def solved_intrinsics(board, seen: dict) -> dict:
    """name -> (the views kept, Intrinsics) of every camera, solved from its views."""
    from .intrinsics import calibrate_intrinsics

    solved = {}
    for name, views in seen.items():
        result = calibrate_intrinsics(name, views.views, board, views.size)
        result.dropped = {**views.left_out, **result.dropped}
        solved[name] = ([v for v in views.views if v.label in result.view_rms_px], result)
    return solved


def cmd_calibrate_intrinsics(args: argparse.Namespace) -> int:
    from .outputs import report_paths, write_intrinsics

    board, seen, output = board_and_views(args)
    report = write_intrinsics(output, solved_intrinsics(board, seen), board.describe())
    report_json, picture = report_paths(output)
    for name, cam in report["cameras"].items():
        dropped = f", {len(cam['dropped'])} left out" if cam["dropped"] else ""
        print(f"{name}: {cam['views']} views{dropped}; RMS {cam['rms_px']:.3f} px; fx {cam['fx']:.1f} "
              f"fy {cam['fy']:.1f} cx {cam['cx']:.1f} cy {cam['cy']:.1f} (± {cam['sigma']['fx']:.1f} px); "
              f"{cam['model']}; {cam['coverage']:.0%} of the picture covered")  # fmt: skip
    print(f"wrote {output}, {report_json.name}, {picture.name}", file=sys.stderr)
    return 0


def cmd_calibrate_extrinsics(args: argparse.Namespace) -> int:
    import numpy as np

    from ..threed.calibration import Camera, cameras_named
    from .boards import board_from
    from .extrinsics import calibrate_extrinsics
    from .outputs import report_paths, write_extrinsics

    board = board_from(args.board, args.corners, args.squares, args.square, args.marker, args.dictionary)
    if board.kind == "checkerboard" and board.cols % 2 == board.rows % 2:
        raise Sapiens2StreamError(f"--corners {args.corners}: a board of {board.cols + 1}x{board.rows + 1} squares "
                                  "looks the same turned half round, so cameras may disagree on its corners; use "
                                  "one with an odd number of squares one way and even the other (9x6 inner "
                                  "corners) or a ChArUco board")  # fmt: skip
    clocks, offsets = video_clocks(camera_specs(args.camera), args.sync)
    _, seen, output = board_and_views(args, clocks)
    if args.intrinsics:
        cams = cameras_named(args.intrinsics, seen, "--intrinsics")
        found = {name: views.views for name, views in seen.items()}
    else:
        solved = solved_intrinsics(board, seen)
        cams = {name: Camera(name, (float(r.size[0]), float(r.size[1])), r.matrix, r.distortions, np.zeros(3),
                             np.zeros(3)) for name, (_, r) in solved.items()}  # fmt: skip
        found = {name: kept for name, (kept, _) in solved.items()}
    placed = calibrate_extrinsics(cams, found, board, args.floor_from_board, refine_intrinsics=not args.intrinsics)
    report = write_extrinsics(output, placed, board, offsets, "given" if args.intrinsics else "refined with the rig")
    report_json, picture = report_paths(output, "rig")
    for name, cam in report["cameras"].items():
        x, y, z = cam["position_m"]
        timing = f"; offset {offsets[name]['offset_s']:+.3f} s ({offsets[name]['method']})" if name in offsets else ""
        print(
            f"{name}: at ({x:.3f}, {y:.3f}, {z:.3f}) m; RMS {cam['rms_px']:.3f} px over {cam['views']} views; "
            f"fx {cam['fx']:.1f}, fy {cam['fy']:.1f}, cx {cam['cx']:.1f}, cy {cam['cy']:.1f}" + timing
        )
    for check, which in ((report["board_check"], "board check"), (report["board_check_held_out"], "held out")):
        if check:
            pictures = f" (pictures {', '.join(map(str, check['pictures']))})" if "pictures" in check else ""
            print(f"{which}{pictures}: neighbouring corners {check['spacing_mean_mm']:.2f} ± "
                  f"{check['spacing_sd_mm']:.2f} mm apart (the square: {check['square_mm']:g} mm, "
                  f"{check['spacing_error_pct']:+.2f} %), flat to {check['flatness_rms_mm']:.2f} mm RMS")  # fmt: skip
    for name, cam in report["cameras"].items():
        if cam["rms_px"] > DISAGREE_PX:
            print(f"warning: camera {name}: RMS {cam['rms_px']:.1f} px, its boards disagree with the others' (are "
                  "the n-th pictures one moment? videos: --sync)", file=sys.stderr)  # fmt: skip
    for name in placed.below_floor:
        print(f"warning: camera {name} is below the floor the board defines (--floor-from-board picks another "
              "picture)", file=sys.stderr)  # fmt: skip
    print(f"wrote {output}, {report_json.name}, {picture.name}", file=sys.stderr)
    return 0


def video_clocks(cameras: dict[str, str], sync: str) -> tuple[dict, dict]:
    """The shared moments of the cameras given as videos: name -> Clock (the first video's frames, each video moved
    by its offset) and name -> its offset as a dict for the report; ({}, {}) without videos. Offsets from the
    soundtracks (`sync` audio, or auto where every one is clear), otherwise none."""
    from dataclasses import replace

    from ..io.soundtracks import sound_offsets, soundtrack
    from .views import IMAGE_SUFFIXES, video_clock

    videos = {n: Path(s) for n, s in cameras.items() if Path(s).is_file() and Path(s).suffix.lower() not in
              IMAGE_SUFFIXES}  # fmt: skip
    if not videos:
        return {}, {}
    clock = video_clock(next(iter(videos.values())))
    found = {}
    if sync != "none":
        try:
            found = sound_offsets({n: soundtrack(path) for n, path in videos.items()}, 1 / clock.fps, sync)
        except ValueError as e:
            raise Sapiens2StreamError(f"--sync audio: {e}; use --sync none for videos started together") from None
    offsets = {n: found[n].as_dict() if n in found else {"offset_s": 0.0, "method": "none"} for n in videos}
    return {n: replace(clock, offset_s=offsets[n]["offset_s"]) for n in videos}, offsets


def cmd_calibrate_people(args: argparse.Namespace) -> int:
    from ..threed.calibration import cameras_named
    from .outputs import report_paths, write_people
    from .people import calibrate_from_people
    from .sightings import sightings

    if not 0.5 < args.height < 2.6:
        raise Sapiens2StreamError(f"--height {args.height}: a person's standing height in metres (e.g. 1.75)")
    cameras = camera_specs(args.camera)
    if len(cameras) < 2:
        raise Sapiens2StreamError("calibrate people needs two or more cameras (--camera NAME=RUN_FOLDER, repeated)")
    output = Path(args.output)
    cams = cameras_named(args.intrinsics, cameras, "--intrinsics")
    videos = {name: path for name, path in cameras.items() if not Path(path).is_dir()
              and Path(path).suffix.lower() != ".jsonl"}  # fmt: skip
    for name, video in videos.items():
        if not Path(video).is_file() and "://" not in video:
            raise Sapiens2StreamError(f"camera {name}: {video}: no such video or run folder")
    if videos and not args.pipeline:
        raise Sapiens2StreamError(f"camera {next(iter(videos))}: a video needs --pipeline (a pose pipeline with a "
                                  "detector) to find the people in it")  # fmt: skip
    runs = {}
    for name, folder in cameras.items():
        runs[name] = Path(folder)
        if name in videos:
            into = output.with_name(output.stem + "_runs") / name
            runs[name] = args.run_video(folder, args.pipeline, into, args.device, not args.no_progress)
    seen = sightings(cams, runs, args.track, args.sync == "motion")
    placed = calibrate_from_people(cams, seen.seen, args.height, seen.measured, args.refine_focal)
    report = write_people(output, placed, args.height, seen.report(), cams if args.refine_focal else None)
    report_json, picture = report_paths(output, "rig")
    for name, cam in report["cameras"].items():
        x, y, z = cam["position_m"]
        timing = report["sync"][name]
        focal = f"; focal {cam['focal_px']:.1f} px (given {cam['given_focal_px']:.1f})" if args.refine_focal else ""
        print(f"{name}: at ({x:.3f}, {y:.3f}, {z:.3f}) m; RMS {cam['rms_px']:.3f} px{focal}; offset "
              f"{timing['offset_s']:+.3f} s ({timing['method']}); tracks {timing['tracks']}")  # fmt: skip
        if timing["method"] == "clock":
            print(f"note: camera {name}: no clear offset in the movement (confidence {timing['confidence']:.2f}); its "
                  "clock taken as it is (a walk that turns and stops shows the offset)", file=sys.stderr)  # fmt: skip
    print(f"{report['points']} points over {report['moments']} moments; the floor fitted to "
          f"{report['floor_rms_m'] * 1000:.0f} mm RMS; eyes {report['eye_height_m']:.3f} m up")  # fmt: skip
    if placed.doubtful:
        print(f"warning: the feet lie {placed.floor_rms_m * 1000:.0f} mm RMS off one floor in every rig tried: "
              "this one is doubtful (record a longer walk through the room, check the rig picture)",
              file=sys.stderr)  # fmt: skip
    print(f"wrote {output}, {report_json.name}, {picture.name}", file=sys.stderr)
    return 0
