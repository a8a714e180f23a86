"""The `sapiens2-stream` command line: one sub-command per verb (`sapiens2-stream --help` lists them), each one's
options beside it (here, or in its package's `cli` module: training, calibration, angles, exports).

Exit codes: 0 done, 2 usage or configuration error, 1 runtime failure, 3 done but a stage failed for a source (it
was left out for that source, the rest ran: `summary.json` `errors` says which), 130 interrupted (outputs
complete up to the interruption; `run --resume` continues).
Errors print one line; `--debug` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from .errors import Sapiens2StreamError, redact
from .registry import REGISTRIES

EXIT_OK, EXIT_RUNTIME, EXIT_CONFIG, EXIT_STAGE_FAILED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
P2S_SKELETONS = ("HALPE_26", "COCO_133_WRIST", "COCO_133")  # outputs.pose2sim.skeleton's choices (tested equal)
P2S_SYNC = ("auto", "motion", "audio", "none")  # outputs.pose2sim.sync's choices


class RuntimeFailure(Exception):
    """Wraps an error raised after the pipeline started, so it exits 1 rather than 2."""

    def __str__(self) -> str:
        return redact(super().__str__())


def add_common_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a YAML key, e.g. runtime.device=cpu"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar or status line")


def add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source", action="append", metavar="[NAME=]URI",
                   help="input: video file, rtsp://..., webcam:0, lavfi:..., image folder or glob; give it several "
                        "times for several sources in one process (outputs in OUTPUT/NAME/)")  # fmt: skip
    p.add_argument("--output", help="output folder (outputs.dir)")
    add_common_options(p)


def run_pipeline(config, progress: bool, resume: bool = False) -> dict:
    """`run`: the pipeline with its progress bar, and the console when runtime.console.port is set."""
    from .runtime.pipeline import Pipeline, SourceFailed
    from .runtime.progress import Progress, format_summary, save_summary

    console = config.runtime.console.port is not None
    if console and config.sources is None:  # the console names every source
        config = config.named()
        print(f"note: the console names the single source {config.sources[0].name} (its outputs in "
              f"{config.per_source()[0].outputs.dir}/)", file=sys.stderr)  # fmt: skip
    pipeline = Pipeline(config, resume=resume, serve=console)  # configuration errors surface here (exit 2)
    pipeline.open()  # and unreachable cameras, unreadable files (exit 2)
    if console:
        from .console.pipeline_backend import PipelineConsole

        pipeline.observe(PipelineConsole(pipeline))
    for stream in pipeline.streams:
        if stream.resumed is not None:
            print(f"{stream.name + ': ' if stream.name else ''}{stream.resumed.describe()}", file=sys.stderr)
    pipeline.observe(Progress(pipeline, enabled=progress))
    failure = None
    try:
        summary = pipeline.run()
    except SourceFailed as e:  # the other sources finished: their outputs and the summary are complete
        summary, failure = e.summary, e
    except Sapiens2StreamError as e:
        raise RuntimeFailure(str(e)) from e
    print(format_summary(summary), file=sys.stderr)
    save_summary(summary, config.outputs.dir)
    print(f"outputs in {Path(config.outputs.dir)}/", file=sys.stderr)
    if pipeline.cut:  # a second Ctrl-C: the outputs are closed; do not wait for the device thread's batch
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_INTERRUPTED)
    if failure is not None:
        raise RuntimeFailure(str(failure)) from failure
    if "pose2sim" in summary and "error" not in summary["pose2sim"]:  # the pose2sim stage made the take's project
        say_project(summary["pose2sim"], summary["pose2sim"]["folder"])
    return summary


def run_pose_video(video: str, pipeline: str, folder: Path, device: str, progress: bool) -> Path:
    """A video through a pose pipeline into a run folder (for `calibrate people`, which sits below the runtime)."""
    from .runtime.pipeline_config import read_pipeline
    from .runtime.pose_run import pose_run

    return pose_run(video, read_pipeline(pipeline), folder, device, progress, origin=pipeline)


def export_project(folders, output, skeleton, calibration, sync, fps) -> dict:
    """Write the Pose2Sim project and say how the cameras were synchronised."""
    from .export.pose2sim import export_pose2sim

    report = export_pose2sim(folders, output, skeleton, calibration, sync, fps)
    say_project(report, output)
    return report


def say_project(report: dict, output) -> None:
    """How a Pose2Sim project came out: its frames, skeleton, and each camera's offset."""
    people = "multi" if report["multi_person"] else "single"
    print(f"Pose2Sim project in {output}/: {report['frames']} frames at {report['frame_rate']:.3g} fps, "
          f"{report['skeleton']}, {people}-person", file=sys.stderr)  # fmt: skip
    for name, cam in report["cameras"].items():
        print(f"  {name}: offset {cam['offset_s']:+.3f} s ({cam['offset_frames']:+d} frames), {cam['method']}, "
              f"confidence {cam['confidence']:.2f}, {cam['people']} people slot(s)", file=sys.stderr)  # fmt: skip


def run_on_fleet(config, address: str, progress: bool) -> dict:
    """`run --ray`: the sources spread over a fleet of Ray workers until Ctrl-C or SIGTERM."""
    from .fleet.controller import run_fleet
    from .runtime.progress import save_summary

    try:
        summary = run_fleet(config, address, progress)
    except Sapiens2StreamError:
        raise
    except Exception as e:
        raise RuntimeFailure(f"{type(e).__name__}: {e}") from e
    save_summary(summary, config.outputs.dir)
    t, moves = summary["totals"], summary["moves"]
    print(f"fleet {summary['fleet']}: {len(summary['sources'])} camera(s), frames in {t['frames_in']}, out "
          f"{t['frames_out']}, {len(moves)} move(s); outputs and fleet.json in {Path(config.outputs.dir)}/",
          file=sys.stderr)  # fmt: skip
    return summary


def cmd_run(args: argparse.Namespace) -> int:
    from .runtime.pipeline_config import load_config

    console = [f"runtime.console.port={args.console}"] if args.console is not None else []
    config = load_config(args.pipeline, [*args.set, *console], args.source, args.output)
    if args.ray:
        if args.resume:
            raise Sapiens2StreamError("--resume is not needed with --ray: fleet cameras always continue")
        return exit_code(run_on_fleet(config, args.ray, not args.no_progress))  # a fleet's as a run's
    summary = run_pipeline(config, not args.no_progress, resume=args.resume)
    return exit_code(summary)


def exit_code(summary: dict) -> int:
    """3 when a stage failed for some source (the rest of the run was done; also when the run was then stopped, as
    a live run always is, so that a supervisor notices), 1 when the Pose2Sim project could not be made (the
    sources' outputs are complete), 130 when interrupted, else 0."""
    if "error" in summary.get("pose2sim", {}):
        return EXIT_RUNTIME
    if summary.get("errors"):
        return EXIT_STAGE_FAILED
    return EXIT_INTERRUPTED if summary["interrupted"] else EXIT_OK


def cmd_batch(args: argparse.Namespace) -> int:
    """Many videos, each written to OUTPUT/<name>/ exactly as `run` writes it; resumable through a manifest."""
    from tqdm import tqdm

    from .runtime.batch_jobs import expand_inputs, run_batch
    from .runtime.pipeline_config import load_config

    videos = expand_inputs(args.inputs)
    config = load_config(args.pipeline, args.set, str(videos[0]), args.output)
    bar = tqdm(total=len(videos), unit="video", disable=args.no_progress, file=sys.stderr, desc="batch")

    def on_video(video, result) -> None:
        bar.update(1)
        status = "failed" if "error" in result else "skipped" if "skipped" in result else "done"
        bar.set_postfix_str(f"{status}: {video.name}", refresh=False)

    try:
        summary = run_batch(
            config, [str(v) for v in videos], args.output, args.ray, args.workers, args.retries, on_video
        )
    finally:
        bar.close()
    bar.write(f"done {len(summary['done'])}, skipped (already done) {len(summary['skipped'])}, "
              f"failed {len(summary['failed'])}; manifest: {args.output}/manifest.json", file=sys.stderr)  # fmt: skip
    for video, reason in summary["failed"].items():
        print(f"failed: {video}: {reason}", file=sys.stderr)
    return EXIT_RUNTIME if summary["failed"] else EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    """`export pose2sim RUN_DIR... --output PROJECT`: the runs of one take's cameras as a Pose2Sim project.
    `export mocap RUN_DIR [--output DIR]`: a run's people in metres as TRC, C3D and BVH per track."""
    if args.format == "mocap":
        from .export.motion3d import mocap_from_run

        written = mocap_from_run(Path(args.run), Path(args.output) if args.output else None, args.formats)
        print(f"wrote {len(written)} files to {Path(args.output or args.run) / 'tracks_3d'} (and world.json)")
        return EXIT_OK
    export_project(args.runs, args.output, args.skeleton, args.calibration, args.sync, args.fps)
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    """Every configuration error `run` would give before its first frame, by the same checks (`check_run`),
    without loading a model, connecting a camera or a broker, or writing anything; then the stages in order."""
    from .runtime.pipeline import check_run
    from .runtime.pipeline_config import load_config

    config = load_config(args.pipeline, args.set, args.source, args.output)
    stages = check_run(config)
    models = ", ".join(f"{k}={v.source}" for k, v in config.enabled_models().items())
    inputs = ", ".join(f"{c.source.name}={c.source.uri}" if c.source.name else c.source.uri
                       for c in config.per_source())  # fmt: skip
    print(f"{args.pipeline}: ok (source {redact(inputs)}; models {models}; detector {config.detector.type})")
    print("stages: " + " -> ".join(stage.name for stage in stages))
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    """One registry of components as a table: what can go in a pipeline, where it runs, which YAML section."""
    from .listing import table

    print(table(args.kind))
    return EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    """The pipeline YAML's JSON Schema, for editors (`# yaml-language-server: $schema=...`) and other checkers;
    with --stub, the assembled configuration's classes written out for type checkers (`runtime/config_shape.py`)."""
    import json

    from .schema import config_stub, json_schema

    if args.stub:
        Path(args.stub).write_text(config_stub())
        return EXIT_OK
    text = json.dumps(json_schema(), indent=1) + "\n"
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return EXIT_OK


DEMO_SIZE = (360, 640)  # the generated clip's height and width: people 215-260 px tall


def demo_detector(boxes: str | None, yolo_weights: str) -> str:
    """The demo's detector when none is asked for: the generated clip's truth, else YOLO where its weights are
    present, else the whole frame (which always works: one person filling the picture)."""
    if boxes:
        return "truth"
    return "yolo" if Path(yolo_weights).exists() else "full_frame"


def cmd_demo(args: argparse.Namespace) -> int:
    """The whole pipeline offline: a clip of synthetic people and the toy models trained on such people."""
    from .detect.options import DetectorConfig
    from .humans.clips import meeting, write_clip
    from .models.toy import toy_model
    from .runtime.pipeline_config import config_from

    out = Path(args.output)
    source, boxes = args.source, None
    if source is None:
        source = str(out / "demo_input.mp4")
        boxes = write_clip(source, meeting(), fps=15, size=DEMO_SIZE, max_frames=args.max_frames)["path"]
    weights = DetectorConfig.weights  # the detector's default: used where present
    detector_name = args.detector or demo_detector(boxes, weights)
    if detector_name == "truth" and boxes is None:
        raise Sapiens2StreamError("--detector truth needs the generated clip (its true boxes); with --source use yolo "
                                  "or full_frame")  # fmt: skip
    present = Path(weights).exists()
    why = "" if args.detector or present else f" (no {weights} here)"
    detector, said = {
        "truth": ({"type": "file", "path": boxes}, "boxes from the generated clip's truth"),
        "yolo": ({"type": "yolo", "weights": weights, "conf": 0.25} if present else
                 {"type": "yolo", "weights": "yolo11n.yaml", "conf": 0.01},
                 f"YOLO boxes ({weights})" if present else "YOLO boxes (yolo11n.yaml, random weights)"),
        "full_frame": ({"type": "full_frame"}, f"the whole frame as one person's box{why}"),
    }[detector_name]  # fmt: skip
    config = config_from({
        "name": "demo",
        "source": {"uri": source, "max_frames": args.max_frames},
        "detector": detector,
        "models": {task: {"source": str(toy_model(task))} for task in ("pose", "seg", "matting")},
        "outputs": {"dir": str(out), "video": {"draw": ["seg", "boxes", "pose"]}, "tracks": {"enabled": True}},
        "runtime": {"device": args.device},
    })  # fmt: skip
    print(f"demo: toy Sapiens2 models (tiny, trained on drawn figures; see the README) on "
          f"{'a clip of drawn people' if boxes else source}; detector: {said}. Keypoints, parts and matte follow "
          "drawn figures, not real people.", file=sys.stderr)  # fmt: skip
    run_pipeline(config, not args.no_progress)
    return EXIT_OK


def cmd_models(args: argparse.Namespace) -> int:
    from .models.tasks import SIZES, TASKS, hub_id

    if args.models_cmd == "make-tiny":
        from .models import make_tiny_checkpoints

        for task, folder in make_tiny_checkpoints(args.dir).items():
            print(f"{task:9s} {folder}")
        print("These weights are random: outputs have the right shapes and mean nothing.")
        return EXIT_OK
    print(f"{'size':6s} {'hidden':>6s} {'layers':>6s} {'heads':>5s} {'mlp':>6s}  hub ids")
    for size, s in SIZES.items():
        released = ", ".join(hub_id(task, size) for task, spec in TASKS.items() if size in spec.sizes)
        print(f"{size:6s} {s['hidden_size']:6d} {s['num_layers']:6d} {s['num_heads']:5d} {s['mlp_dim']:6d}  {released}")
    print("Weights: Sapiens2 licence (no surveillance or biometric uses). Load any of them with load_model(id).")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sapiens2-stream", description="Sapiens2 on video: files, RTSP cameras, webcams."
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a pipeline YAML")
    run.add_argument("pipeline", help="pipeline YAML (see pipelines/)")
    add_run_options(run)
    run.add_argument("--resume", action="store_true", help="continue an interrupted run in the same --output")
    run.add_argument("--ray", metavar="ADDRESS",
                     help="spread the sources over a fleet of Ray workers, one per GPU: local (start Ray here), auto "
                          "(the cluster this machine belongs to) or ray://HEAD:10001")  # fmt: skip
    run.add_argument("--console", type=int, metavar="PORT",
                     help="serve the web console on this port (127.0.0.1 unless runtime.console.host says "
                          "otherwise): live views, status, sources added and removed while running")  # fmt: skip
    run.set_defaults(func=cmd_run)

    batch = sub.add_parser("batch", help="process many videos in parallel (locally or on a Ray cluster), resumably")
    batch.add_argument("pipeline", help="pipeline YAML (its source is replaced by each input)")
    batch.add_argument("inputs", nargs="+", help="video files, globs, or .txt/.lst files listing one path per line")
    batch.add_argument("--output", required=True, help="batch output folder: one subfolder per video + manifest.json")
    batch.add_argument(
        "--ray", metavar="ADDRESS", help="run on Ray: 'local' (start one here), 'auto', or ray://host:port"
    )
    batch.add_argument("--workers", type=int, help="Ray actors (default: one per GPU, else one per 4 CPUs)")
    batch.add_argument("--retries", type=int, default=2, help="tries after the first failure of a video (default 2)")
    add_common_options(batch)
    batch.set_defaults(func=cmd_batch)

    export = sub.add_parser("export", help="convert what runs wrote for other tools")
    formats = export.add_subparsers(dest="format", required=True)
    p2s = formats.add_parser("pose2sim", help="the runs of one take's cameras as a synchronised Pose2Sim project")
    p2s.add_argument("runs", nargs="+", metavar="RUN_DIR",
                     help="the output folder of each camera's run (the folder name is the camera's name)")  # fmt: skip
    p2s.add_argument("--output", required=True, metavar="PROJECT", help="the Pose2Sim project folder to write")
    p2s.add_argument("--skeleton", choices=P2S_SKELETONS, default=P2S_SKELETONS[0],
                     help="Pose2Sim's 2-D skeleton to write (default: %(default)s)")  # fmt: skip
    p2s.add_argument("--calibration", metavar="Calib.toml", help="Pose2Sim's calibration; cameras matched by name")
    p2s.add_argument("--sync", choices=P2S_SYNC, default=P2S_SYNC[0],
                     help="how to find the cameras' time offsets (default: %(default)s: the soundtracks when every "
                          "camera has a clear one, otherwise the people's motion; none: the recordings start "
                          "together)")  # fmt: skip
    p2s.add_argument("--fps", type=float, help="the project's frame rate (default: the first camera's)")
    mocap = formats.add_parser("mocap", help="a run's people in metres (pose + pointmap) as TRC, C3D and BVH")
    mocap.add_argument("run", metavar="RUN_DIR", help="the output folder of a run with pose and pointmap models")
    mocap.add_argument("--output", metavar="DIR", help="where world.json and tracks_3d/ go (default: RUN_DIR)")
    mocap.add_argument("--formats", nargs="+", choices=("trc", "c3d", "bvh"), default=["trc", "c3d", "bvh"],
                       help="the files per track (default: all three)")  # fmt: skip
    export.set_defaults(func=cmd_export)

    validate = sub.add_parser("validate", help="check a pipeline YAML without running it")
    validate.add_argument("pipeline")
    add_run_options(validate)
    validate.set_defaults(func=cmd_validate)

    listing = sub.add_parser("list", help="list the components of one kind: name, scope, place, YAML section")
    listing.add_argument("kind", choices=tuple(REGISTRIES))
    listing.set_defaults(func=cmd_list)

    schema = sub.add_parser("schema", help="print the pipeline YAML's JSON Schema (for editors and checkers)")
    schema.add_argument("--output", metavar="FILE", help="write it to FILE instead")
    schema.add_argument(
        "--stub",
        metavar="FILE",
        help="write the configuration's classes for type checkers to FILE "
        "(the package's is sapiens2_stream/runtime/config_shape.py) instead",
    )
    schema.set_defaults(func=cmd_schema)

    demo = sub.add_parser("demo", help="the whole pipeline on a generated clip of people, with the toy models")
    demo.add_argument("--source", help="input instead of the generated clip")
    demo.add_argument("--output", default="demo-out", help="output folder (default demo-out)")
    demo.add_argument("--max-frames", type=int, default=None, help="stop after N frames (default: all 90 generated)")
    demo.add_argument("--detector", choices=["truth", "yolo", "full_frame"],
                      help="the generated clip's true boxes (its default), YOLO (yolo11n.pt where present, else random "
                      "weights), or the full frame (--source's default without yolo11n.pt)")  # fmt: skip
    demo.add_argument("--device", default="auto")
    demo.add_argument("--no-progress", action="store_true")
    demo.set_defaults(func=cmd_demo)

    from .angles.cli import add_parser as add_angles
    from .calibrate.cli import add_parser as add_calibrate
    from .deploy.cli import add_parser as add_export_model
    from .kinematics.cli import add_parser as add_kinematics
    from .train.cli import add_parsers

    add_parsers(sub)
    add_calibrate(sub, run_video=run_pose_video)
    add_angles(sub)
    add_kinematics(sub)
    add_export_model(sub)

    models = sub.add_parser("models", help="list model sizes and hub ids; make tiny random checkpoints")
    models_sub = models.add_subparsers(dest="models_cmd")
    tiny = models_sub.add_parser("make-tiny", help="write tiny random checkpoints for every task")
    tiny.add_argument("dir", help="output folder")
    models.set_defaults(func=cmd_models)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    say_warnings(args.debug)
    try:
        return args.func(args)
    except RuntimeFailure as e:
        if args.debug:
            raise
        print(f"sapiens2-stream: error: {e}", file=sys.stderr)
        return EXIT_RUNTIME
    except Sapiens2StreamError as e:
        if args.debug:
            raise
        print(f"sapiens2-stream: error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        print("sapiens2-stream: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # a bug or an environment failure: one line, the traceback with --debug
        if args.debug:
            raise
        print(f"sapiens2-stream: unexpected {type(e).__name__}: {redact(str(e))} (run with --debug for the "
              "traceback)", file=sys.stderr)  # fmt: skip
        return EXIT_RUNTIME


def say_warnings(debug: bool) -> None:
    """What the run says as it goes (a stage that failed for a source): one line each on stderr, prefixed like the
    errors; with --debug also the tracebacks."""
    log = logging.getLogger("sapiens2_stream")
    if not any(isinstance(h, StderrLines) for h in log.handlers):
        log.addHandler(StderrLines())
        log.propagate = False
    log.setLevel(logging.DEBUG if debug else logging.INFO)


class StderrLines(logging.Handler):
    """Each message as a line on the current stderr (the progress bar's stream)."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"sapiens2-stream: {record.getMessage()}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
