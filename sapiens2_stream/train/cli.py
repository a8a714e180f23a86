"""The command line's `finetune` and `synth` verbs (parsers here, so `--help` stays quick: nothing heavy is
imported until a verb runs)."""

from __future__ import annotations

import argparse
import sys

from ..arguments import size_arg
from ..errors import Sapiens2StreamError
from .sureness import Sureness
from .trainable import trainable_tasks


def add_parsers(sub) -> None:
    ft = sub.add_parser("finetune", help="train a pose, seg, matting, normal or pointmap model on your labelled data")
    ft.add_argument("task", choices=trainable_tasks())
    ft.add_argument(
        "--data",
        required=True,
        help="pose: a COCO keypoints JSON; seg: a folder with images/ and labels/ (PNG class ids); "
        "matting: a folder with images/ and alpha/ (PNG); normal: images/ and normals/ (RGB PNG, (n + 1) / 2); "
        "pointmap: images/ and pointmap/ (.npy [H, W, 3], camera-frame metres)",
    )
    ft.add_argument("--val", help="held-out data in the same format (default: a tenth of --data)")
    ft.add_argument("--images", metavar="DIR", help="pose: the images' folder (default: beside the JSON)")
    ft.add_argument(
        "--keypoints",
        metavar="MAP.json",
        help='pose: {"their name": "one of the 308"} for names that '
        "are not the 308's own (COCO-17 names map directly)",
    )
    ft.add_argument("--classes", metavar="MAP.json", help='seg: {"their id": one of 0-28, or 255 to ignore}')
    ft.add_argument(
        "--from",
        dest="source",
        default="tiny",
        metavar="MODEL",
        help="a hub id, folder or .safetensors file (as models.<task>.source), or tiny: a fresh tiny model (default)",
    )
    ft.add_argument("--output", required=True, metavar="DIR", help="best/, last/, metrics.jsonl go here")
    ft.add_argument("--steps", type=int, default=2000, help="optimizer steps (default %(default)s)")
    ft.add_argument("--batch-size", type=int, default=16, help="default %(default)s")
    ft.add_argument("--lr", type=float, help="peak learning rate (default 1e-3 from tiny, 1e-4 from a trained model)")
    ft.add_argument(
        "--input-size",
        type=size_arg,
        metavar="HxW",
        help="train at this input size (default: the model's own); saved in config.json, where a pipeline reads it",
    )
    ft.add_argument("--freeze", choices=("none", "backbone"), default="none", help="backbone: train the head only")
    ft.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:1")
    ft.add_argument("--resume", action="store_true", help="continue from --output's last/ and its optimizer state")
    ft.add_argument("--val-every", type=int, help="validate every N steps (default: a tenth of --steps)")
    ft.add_argument("--seed", type=int, default=0)
    ft.add_argument(
        "--head-width", type=int, default=1, metavar="N", help="a fresh tiny head's channels times N (default 1)"
    )
    ft.add_argument("--workers", type=int, metavar="N",
                    help="processes making batches ahead of the step (0: on the training thread; default: the "
                    "cores but one, at most 4)")  # fmt: skip
    ft.add_argument("--no-progress", action="store_true")
    ft.set_defaults(func=cmd_finetune)

    lb = sub.add_parser(
        "label",
        help="pseudo-labels from a teacher pipeline (its runs or videos) in finetune's "
        "formats, only what the teacher is sure of, split into train/ and val/ by time",
    )
    lb.add_argument(
        "inputs",
        nargs="+",
        metavar="RUN_FOLDER|VIDEO",
        help="run folders (their results.jsonl and source) or videos, URLs of files, picture folders",
    )
    lb.add_argument(
        "--output",
        required=True,
        metavar="DATA",
        help="train/ and val/ (keypoints.json, images/, labels/, alpha/), label.json; finetune --data DATA reads it",
    )
    lb.add_argument(
        "--pipeline",
        metavar="YAML",
        help="the teacher: its models (pose, seg, matting), detector and "
        "tracker (default: a run folder's own models; for videos the toy models)",
    )
    lb.add_argument(
        "--min-score",
        type=float,
        default=Sureness.min_score,
        help="a keypoint's heatmap peak on both the plain and the mirrored forward (default %(default)s)",
    )
    lb.add_argument(
        "--max-flip-gap",
        type=float,
        default=Sureness.max_flip_gap,
        metavar="SHARE",
        help="plain against mirrored forward, of the box's longer side (default %(default)s)",
    )
    lb.add_argument(
        "--max-jump",
        type=float,
        default=Sureness.max_jump,
        metavar="SHARE",
        help="off the midpoint of the track's neighbouring frames, of the box's longer side (default %(default)s)",
    )
    lb.add_argument(
        "--min-keypoints",
        type=int,
        default=Sureness.min_keypoints,
        help="people with fewer sure keypoints are left out (default %(default)s)",
    )
    lb.add_argument(
        "--keypoints",
        choices=("all", "body"),
        default="all",
        help="label all 308, or the body's (COCO-17 and the six foot points; default %(default)s)",
    )
    lb.add_argument("--every", type=int, default=1, metavar="N", help="every Nth frame (default %(default)s)")
    lb.add_argument(
        "--val-share",
        type=float,
        default=0.2,
        help="the last share of each source's time held out for validation (default %(default)s)",
    )
    lb.add_argument(
        "--gap-s",
        type=float,
        default=1.0,
        help="seconds before the validation part left out of both (default %(default)s)",
    )
    lb.add_argument("--device", default="auto")
    lb.add_argument("--no-progress", action="store_true")
    lb.set_defaults(func=cmd_label)

    synth = sub.add_parser("synth", help="synthetic humans with truth: training sets and clips")
    kinds = synth.add_subparsers(dest="kind", required=True)
    ds = kinds.add_parser("dataset", help="pictures with COCO keypoints, part labels and alpha (finetune's formats)")
    ds.add_argument("output", metavar="DIR")
    ds.add_argument("--count", type=int, default=1000, help="pictures (default %(default)s)")
    ds.add_argument("--size", type=size_arg, default=(240, 320), metavar="HxW", help="default 240x320")
    ds.add_argument("--seed", type=int, default=0)
    ds.add_argument("--no-progress", action="store_true")
    clip = kinds.add_parser("clip", help="a video of people doing things, with its truth beside it (.truth.json)")
    clip.add_argument("output", metavar="VIDEO.mp4")
    clip.add_argument("--scene", default="crossing", help="crossing, fall, everything, meeting (default %(default)s)")
    clip.add_argument("--fps", type=int, default=15)
    clip.add_argument("--size", type=size_arg, default=(240, 320), metavar="HxW", help="default 240x320")
    clip.add_argument("--mirror", action="store_true", help="the same scene seen in a mirror")
    synth.set_defaults(func=cmd_synth)


def cmd_finetune(args: argparse.Namespace) -> int:
    from .finetune import FinetuneOptions, finetune

    opts = FinetuneOptions(
        task=args.task,
        data=args.data,
        output=args.output,
        source=args.source,
        val=args.val,
        images=args.images,
        keypoints=args.keypoints,
        classes=args.classes,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        input_size=args.input_size,
        freeze=args.freeze,
        device=args.device,
        resume=args.resume,
        val_every=args.val_every,
        seed=args.seed,
        head_width=args.head_width,
        workers=args.workers,
        progress=not args.no_progress,
    )
    if args.steps < 1 or args.batch_size < 1 or args.head_width < 1:
        raise Sapiens2StreamError("--steps, --batch-size and --head-width must be at least 1")
    if args.workers is not None and args.workers < 0:
        raise Sapiens2StreamError("--workers must be 0 or more")
    scores = finetune(opts)
    print(
        f"finetune {args.task}: {', '.join(f'{k} {v:.4f}' for k, v in scores.items())}; best/ and last/ in "
        f"{args.output}",
        file=sys.stderr,
    )
    return 0


def cmd_label(args: argparse.Namespace) -> int:
    from .label import LabelOptions, label

    rules = Sureness(args.min_score, args.max_flip_gap, args.max_jump, args.min_keypoints)
    summary = label(LabelOptions(args.inputs, args.output, args.pipeline, rules, args.keypoints, args.every,
                                 args.val_share, args.gap_s, args.device, not args.no_progress))  # fmt: skip
    kept, frames = summary["people_kept"], summary["frames"]
    print(f"label: {kept['train']} people in {frames['train']} frames for training, {kept['val']} in "
          f"{frames['val']} for validation, of {summary['people_seen']} seen; "
          f"{summary['keypoints_kept_share']:.0%} of their keypoints kept; in {args.output} "
          f"(finetune pose --data {args.output})", file=sys.stderr)  # fmt: skip
    return 0


def cmd_synth(args: argparse.Namespace) -> int:
    if args.kind == "dataset":
        from ..humans.datasets import write_dataset

        out = write_dataset(args.output, args.count, args.size, args.seed, not args.no_progress)
        print(f"{args.count} pictures in {out}: keypoints.json, images/, labels/, alpha/, normals/, pointmap/",
              file=sys.stderr)  # fmt: skip
        return 0
    from ..humans.clips import SCENES, write_clip

    if args.scene not in SCENES:
        raise Sapiens2StreamError(f"unknown scene {args.scene!r}; choose one of {', '.join(SCENES)}")
    truth = write_clip(args.output, SCENES[args.scene](), args.fps, args.size, mirror=args.mirror)
    print(f"{args.output}: {len(truth['frames'])} frames; truth in {truth['path']}", file=sys.stderr)
    return 0
