"""The `sapiens2-stream` command line.

Errors a user can cause print one line and exit 2 (usage, configuration) or 1 (runtime); `--debug` shows the
traceback instead.
"""

from __future__ import annotations

import argparse
import sys

from .errors import Sapiens2StreamError


def cmd_models(args: argparse.Namespace) -> int:
    from .models.config import SIZES, TASKS, hub_id

    if args.models_cmd == "make-tiny":
        from .models import make_tiny_checkpoints

        for task, folder in make_tiny_checkpoints(args.dir).items():
            print(f"{task:9s} {folder}")
        print("These weights are random: outputs have the right shapes and mean nothing.")
        return 0
    print(f"{'size':6s} {'hidden':>6s} {'layers':>6s} {'heads':>5s} {'mlp':>6s}  hub ids")
    for size, (d, layers, heads, mlp) in SIZES.items():
        tasks = [t for t in TASKS if t == "pretrain" or size != "0.1b"]
        tasks = [t for t in tasks if t != "matting"] + (["matting"] if size == "1b" else [])
        print(f"{size:6s} {d:6d} {layers:6d} {heads:5d} {mlp:6d}  " + ", ".join(hub_id(t, size) for t in tasks))
    print("Weights: Sapiens2 licence (no surveillance or biometric uses). Load any of them with load_model(id).")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sapiens2-stream", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)
    models = sub.add_parser("models", help="list model sizes and hub ids; make tiny random checkpoints")
    models_sub = models.add_subparsers(dest="models_cmd")
    tiny = models_sub.add_parser("make-tiny", help="write tiny random checkpoints for every task")
    tiny.add_argument("dir", help="output folder")
    models.set_defaults(func=cmd_models)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except Sapiens2StreamError as e:
        if args.debug:
            raise
        print(f"sapiens2-stream: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sapiens2-stream: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
