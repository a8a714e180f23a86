"""What the console says of a source: state, rates, counters, as JSON (`/api/v1/sources`)."""

from __future__ import annotations

from ..runtime.stages.base import report_keys


def state(stream) -> str:
    """live, connecting (a live source whose camera has not delivered yet), reconnecting (waiting for it to come
    back), ended or failed."""
    if stream.error is not None:
        return "failed"
    if stream.closed or not stream.reading:
        return "ended"
    connection = stream.source.connection
    return "live" if connection is None else connection.state


def counters(stream) -> dict:
    """A stream's running counts and recent rates, from its numbers' snapshot, as a pipeline's console shows them
    and a fleet worker reports them."""
    n = stream.numbers.snapshot()
    return {
        "frames_in": n["frames_in"], "frames_out": n["frames_out"], "processed": n["processed"],
        "processed_fps": n["processed_fps"], "fps_in": n["recent_fps"]["in"], "fps_written": n["recent_fps"]["written"],
        "dropped": n["dropped"], "reconnects": n["reconnects"], "last_frame": n["last_frame"], "people": n["people"],
        "result_age_s": n["result_age_s"],
        "errors": n["errors"],  # stages that failed for this source (each off for it since)
        **dict.fromkeys(report_keys()), **stream.stage_reports(),  # each reporting stage's status (None: not run)
        "connection": None if stream.source.connection is None else stream.source.connection.snapshot(),
    }  # fmt: skip


def source_status(name: str, uri: str, state: str, counts: dict, result_age_s: float | None) -> dict:
    """One source as `/api/v1/sources` lists it; the same shape from one pipeline and from a fleet's driver, which
    adds where the camera runs. `counts`: as `counters` gives them (a camera not reported yet: empty)."""
    return {
        "name": name, "uri": uri, "state": state, "fps_in": counts.get("fps_in", 0.0),
        "fps_written": counts.get("fps_written", 0.0), "frames_in": counts.get("frames_in", 0),
        "frames_out": counts.get("frames_out", 0), "dropped": counts.get("dropped", {}),
        "reconnects": counts.get("reconnects", 0),
        "last_result_age_s": None if result_age_s is None else round(result_age_s, 3),
        "last_frame": counts.get("last_frame"), "people": counts.get("people", 0),
        **{key: counts.get(key) for key in report_keys()},  # the stages' status (`Stage.reports`): event_counts
        # (zones' occupancy, lines' crossings, events by kind), angles (each person's latest, by track id), ...
        "errors": counts.get("errors", []),  # stages that failed for this source: {stage, error, frame}
        "connection": counts.get("connection"),  # a live source: state, why the latest attempt failed, next attempt
    }  # fmt: skip


def describe(stream) -> dict:
    """A source of this pipeline as the console lists it."""
    counts = counters(stream)
    return source_status(stream.name, stream.source.source_id, state(stream), counts,
                         counts["result_age_s"])  # fmt: skip
