"""What a stage is, and the one registry that puts the stages in order.

A built-in stage is a class in a file of its own in this package, registered by name (`@register_stage("events")`),
with its place given by one list, `ORDER` below: a new built-in stage is its file plus its name in that list
(every module of the package is imported, so the file's name does not matter). Users' stages say where they go
with `after:`. Every stage has the same four parts whatever it does:

- `open(options, ctx) -> state`: what it keeps for one source (a tracker, a filter, open files), made when the
  source starts; `enabled(options, ctx)` says whether it runs for that source at all, `check(options, ctx)` finds
  configuration errors before anything is opened (said at `validate`, exit 2). `options` is the stage's own
  section (`section`: `smoothing`, `outputs.pose2sim`, ...) and `ctx` a small context (`context.SourceContext`,
  `context.GroupContext`): a stage never sees the whole configuration;
- `__call__(state, item)`: its work on one item, in the source's frame order;
- `close(state)`: once per source when the source ends, also after an interruption or a failure of the stage;
- `replay`: whether results that `--resume` draws again (their people come from the interrupted run's records)
  pass through it; a stage that only computes from people leaves them alone.

Three scopes. `batch` stages (take, detect, track, infer) work on micro-batches of frames from every source, on the
pipeline's loop, along the path `runtime.frame_path` tells (they are awaited; their state is the run's `BatchRun`,
opened once). `source` stages (temporal, smooth, threed, angles, kinematics, events, write, and users' own) work on
one source's results in frame order on that source's writer thread; the runner (`stages.runner.SourceStages`) owns
their order, timing, replay and failures: a stage that raises for one source is said once, counted, and left out
for that source from then on (`summary.json` `errors`, /metrics, the console), while that source's other stages
and every other source go on. `group` stages
(triangulate, group_angles, group_kinematics, write_3d, pose2sim) work across sources, once per run, after every
source's own stages (`stages.group.GroupStages`): one takes the sources' results (`offer`) and makes moments (the
people of a calibrated camera group in metres), which pass through the group stages after it in order (`__call__`),
so a later stage can add to a moment before it is written.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any, ClassVar, Literal

from ...errors import Sapiens2StreamError
from ...registry import STAGES, Row

Scope = Literal["batch", "source", "group"]

log = logging.getLogger("sapiens2_stream")


class Stage:
    """The base of the built-in stages (users' stages need not inherit it: the four parts are enough)."""

    name: ClassVar[str] = ""
    after: ClassVar[str | None] = None  # the stage this one follows directly (None: the first): from ORDER
    scope: ClassVar[Scope] = "source"
    replay: ClassVar[bool] = False  # results redrawn by --resume pass through it
    builtin: ClassVar[bool] = True
    section: ClassVar[str | None] = None  # the YAML section the stage reads, for `list stages`
    Options: ClassVar[type | None] = None  # that section's class, as its package's `options` module declares it
    # (`@section(key=...)`; the YAML is assembled from those declarations, runtime/pipeline_config.py)
    doc: ClassVar[str] = ""  # what it does in one line, for `list stages`
    files_off: ClassVar[dict[str, Any]] = {}  # keys of its section, and values, with which it writes no file: the
    # Python API's `output=None` sets them (a stage that writes files declares them here, nowhere else)
    reports: ClassVar[str | None] = None  # the key its status (`report`) has in the console's source status

    @classmethod
    def rank(cls) -> int:
        """Where `list stages` puts it: its place in `ORDER`."""
        return place(cls.name)

    @classmethod
    def listing(cls) -> Row:
        """Its row in `sapiens2-stream list stages` (the stage before it: the one before it in `ORDER`)."""
        at = place(cls.name)
        return cls.name, cls.scope, f"after {ORDER[at - 1]}" if at else "first", cls.section or "", cls.doc

    def enabled(self, options, ctx) -> bool:
        """Whether the stage runs for a source (`ctx`: its `SourceContext`; a group stage's: the `GroupContext`)."""
        return True

    def check(self, options, ctx) -> None:
        """Configuration errors this stage can find without opening anything (raise Sapiens2StreamError)."""

    def open(self, options, ctx) -> Any:
        """The stage's state for one source (`ctx`: its `SourceContext`, opened; a batch stage's: the run's
        `flow.BatchRun`, the same for every source)."""
        return None

    def __call__(self, state, item):
        raise NotImplementedError

    def close(self, state) -> None:
        pass

    def summary(self, state) -> dict:
        """What the stage adds to its source's part of summary.json."""
        return {}

    def emits(self, options) -> bool:
        """Whether its results carry events with these options (`result.events`): the run then keeps an event
        log and webhooks for the source (`SourceContext.events`)."""
        return False

    def report(self, state) -> Any:
        """Its status now (a stage that `reports`), read on other threads: the console shows it under `reports`
        (`/api/v1/sources`, also from a fleet's workers) and /metrics gives each number at its top level as
        `sapiens2_stage_status{source, stage, key}`."""
        return None


class GroupStage(Stage):
    """The base of the cross-source stages: opened once per run with their section, a `GroupContext` and
    `emit(moment)` (what passes a moment to the group stages after it); `offer(state, result, label, live)` takes
    each source's results after its own stages, `__call__(state, moment)` each moment an earlier group stage made.
    The run's hooks (`poll` when nothing came for a few milliseconds, `source_closed`, `ending`) let a stage make
    moments on time; `close` ends it with the run. All of them are called on the group stages' own thread
    (`stages.group`), one at a time."""

    scope: ClassVar[Scope] = "group"

    def open(self, options, ctx, emit) -> Any:
        return None

    def offer(self, state, result, label: str, live: bool) -> None:
        """A source's result (`label`: its name; `live`: a camera, timed by its wall clock)."""

    def __call__(self, state, moment) -> None:
        pass

    def poll(self, state) -> None:
        pass

    def source_closed(self, state, label: str) -> None:
        pass

    def ending(self, state) -> None:
        pass

    def resume(self, state, moments: list) -> None:
        """`--resume`: the interrupted run's moments as it wrote them (OUTPUT/3d/keypoints_3d.jsonl read back as
        `io.records.RecordedMoment`s, each stage's additions in their people's `fields`), before anything new
        comes: taken into the state (ids that go on, each person's rows for the files at the end), never told
        anyone again."""


# The built-in stages in the order a frame meets them: the batch stages (micro-batches of every source), the source
# stages (one source's results in frame order), then the group stages (across sources, once per run). The one
# place that says where a built-in stage runs.
ORDER: tuple[str, ...] = ("take", "detect", "track", "infer", "temporal", "smooth", "threed", "angles", "kinematics",
                          "events", "write", "triangulate", "group_angles", "group_kinematics", "write_3d",
                          "pose2sim")  # fmt: skip


def register_stage(name: str):
    """Class decorator: the built-in stage `name` (in `registry.STAGES`); its place is its position in `ORDER`."""

    def register(cls: type[Stage]) -> type[Stage]:
        cls.name = name
        return STAGES.add(cls)

    return register


class Failures(set):
    """The names of one runner's stages that failed, each off from then on (a set: asking whether a stage is off
    costs what a set costs, on every result). `fail` says a failure once (one line naming where, the stage and the
    error; the traceback with --debug). A source's runner and the group's keep theirs in one; each counts its own
    (a source's numbers, the group's errors)."""

    def __init__(self, where: str, after: str) -> None:
        """`where`: what the line starts with ("source cam1: stage", "group stage"); `after`: what it ends with
        (what goes on without the stage)."""
        super().__init__()
        self.where, self.after = where, after

    def fail(self, name: str, error: BaseException, when: str = "") -> str:
        """Stage `name` failed (`when`: " at frame 12", " after 3 moments"); off from now on. Returns the error's
        one-line message, for the runner to count."""
        self.add(name)
        message = f"{type(error).__name__}: {error}"
        log.error("%s %s failed%s: %s %s", self.where, name, when, message, self.after)
        log.debug("".join(traceback.format_exception(error)))
        return message


def reports_of(stages: list, states: dict, failed: Failures) -> dict:
    """Each reporting built-in stage's status now, under its `reports` key (`Stage.report`), read on the console's
    or /metrics' thread: a stage that failed, or does not run, reports nothing, and one that cannot report now is
    left out (the reader must not fail with it). Users' stages report through their fields and files."""
    out = {}
    for stage in stages:
        if getattr(stage, "reports", None) and stage.name in states and stage.name not in failed:
            try:
                out[stage.reports] = stage.report(states[stage.name])
            except Exception as e:
                log.debug("stage %s could not report: %s", stage.name, e)
    return out


def report_keys() -> list[str]:
    """The keys the reporting stages' status has in a source's status (`Stage.reports`)."""
    return [cls.reports for cls in STAGES.values() if cls.reports]


def place(name: str) -> int:
    """A built-in stage's position in `ORDER` (a registered stage missing from it is a programming error)."""
    if name not in ORDER:
        raise Sapiens2StreamError(f"the built-in stage {name!r} has no place in stages.base.ORDER; add its name there")
    return ORDER.index(name)


def in_order(stages: list) -> list:
    """The built-in stages in `ORDER` (each told the stage before it, `after`), then users' stages in the order
    given: each directly after its anchor and after users' stages already placed there (so users' stages keep
    their order), before the built-in stage that follows the anchor."""
    order = sorted((s for s in stages if s.builtin), key=lambda s: place(s.name))
    for before, stage in zip([None, *order], order, strict=False):
        stage.after = before.name if before is not None else None
    pending = [s for s in stages if not s.builtin]
    while pending:
        names = [s.name for s in order]
        ready = next((s for s in pending if s.after in names), None)
        if ready is None:
            stage = pending[0]
            raise Sapiens2StreamError(f"stages: {stage.name!r} is to run after {stage.after!r}, which is no "
                                      f"stage (stages: {', '.join(names)})")  # fmt: skip
        pending.remove(ready)
        i = names.index(ready.after) + 1
        while i < len(order) and order[i].after == ready.after and not order[i].builtin:
            i += 1
        order.insert(i, ready)
    return order
