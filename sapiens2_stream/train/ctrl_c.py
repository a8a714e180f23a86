"""Ctrl-C for the training commands (`finetune`, `label` and its teacher): the first stops within a step, the
second at once.

Python's own Ctrl-C raises KeyboardInterrupt wherever the main thread is. A training step torn that way could
leave the model half-updated (some layers stepped, others not) just before `last/` is saved from it; so while a
step runs the first Ctrl-C is only noted, and the step ends first. A second Ctrl-C ends the process at once,
exit 130, whatever it is doing: the checkpoints are written beside and renamed into place, so what is on disk is
whole either way.

The handler is installed even where SIGINT came in ignored: a shell starts background jobs (`cmd &` in a script,
`nohup`-less services) with SIGINT ignored, and Python keeps it so, which left `kill -INT` doing nothing and
only SIGKILL ending a run (losing its last steps).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

EXIT_INTERRUPTED = 130


class CtrlC:
    """Whether Ctrl-C was pressed, and whether the code now running may be torn by it."""

    def __init__(self) -> None:
        self.pressed = 0
        self.holding = False  # inside `hold()`: the first Ctrl-C waits for its end

    def handle(self, signum, frame) -> None:
        self.pressed += 1
        if self.pressed > 1:
            print("sapiens2-stream: interrupted again: quitting now", file=sys.stderr, flush=True)
            os._exit(EXIT_INTERRUPTED)
        if not self.holding:
            raise KeyboardInterrupt
        print("sapiens2-stream: interrupted: stopping after this step (Ctrl-C again to quit at once)",
              file=sys.stderr, flush=True)  # fmt: skip

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Run the body whole: a first Ctrl-C inside it raises KeyboardInterrupt only when it ends."""
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
        if self.pressed:
            raise KeyboardInterrupt


@contextmanager
def ctrl_c() -> Iterator[CtrlC]:
    """Install the handler for the body (from the main thread; elsewhere Python's own stays, as signals reach the
    main thread only), and put back what was there."""
    state = CtrlC()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return
    before = signal.signal(signal.SIGINT, state.handle)
    try:
        yield state
    finally:
        signal.signal(signal.SIGINT, before)
