"""Argument types the command line's verbs share (a module of its own, so any layer's parser can use it)."""

from __future__ import annotations

import argparse


def size_arg(text: str) -> tuple[int, int]:
    """`HxW` -> (H, W)."""
    try:
        h, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected HEIGHTxWIDTH, e.g. 256x192") from None
    return h, w
