"""`runtime.metrics`: Prometheus metrics at /metrics and a health check at /healthz, for Grafana and for
whatever restarts a stuck service.

Counters and gauges are read from the run's own numbers at scrape time (the same ones summary.json reports), so
the two always agree; latencies are histograms observed as they happen. /healthz answers 200 while every live
source is connected and delivered a frame within its `source.timeout_s`, 503 naming the cameras not connected and
the silent ones otherwise. It listens on
127.0.0.1 unless `runtime.metrics.host` says otherwise.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, HTTPServer

import torch
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..errors import Sapiens2StreamError
from .numbers import DROP_REASONS
from .observer import Observer
from .options import MetricsConfig

AGE_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
STAGE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


class RunCollector:
    """The run's counters and gauges, per source (each source's numbers' snapshot), read when Prometheus scrapes."""

    def __init__(self, pipeline) -> None:
        self.pipeline = pipeline

    def collect(self):
        streams = list(self.pipeline.streams)
        snapshots = {id(s): s.numbers.snapshot() for s in streams}
        per_source = {
            "frames_in": ("frames read from the source", "frames_in"),
            "frames_processed": ("frames the models processed", "processed"),
            "frames_written": ("frames written to the outputs", "frames_out"),
            "reconnects": ("times the source was reconnected", "reconnects"),
        }
        for name, (doc, key) in per_source.items():
            family = CounterMetricFamily(f"sapiens2_{name}", doc, labels=["source"])
            for s in streams:
                family.add_metric([s.label], snapshots[id(s)][key])
            yield family
        dropped = CounterMetricFamily("sapiens2_frames_dropped", "frames dropped, by reason",
                                      labels=["source", "reason"])  # fmt: skip
        outputs = CounterMetricFamily("sapiens2_output_dropped", "frames or messages an output could not take",
                                      labels=["source", "output"])  # fmt: skip
        people = GaugeMetricFamily("sapiens2_people", "people in the latest written frame", labels=["source"])
        fps = GaugeMetricFamily("sapiens2_processed_fps", "frames processed per second over the run", labels=["source"])
        behind = GaugeMetricFamily("sapiens2_under_load", "1 while a live source is behind", labels=["source"])
        served = GaugeMetricFamily("sapiens2_served_share", "share of a live source's frames the models served over "
                                   "the run (the rest dropped for want of time)", labels=["source"])  # fmt: skip
        up = GaugeMetricFamily("sapiens2_source_up", "1 while a live source's camera delivers, 0 while it is "
                               "connecting, reconnecting or given up", labels=["source"])  # fmt: skip
        for s in streams:
            label, numbers = s.label, snapshots[id(s)]
            for reason in DROP_REASONS:
                dropped.add_metric([label, reason], numbers["dropped"].get(reason, 0))
            for output, stats in s.output_stats().items():
                if "dropped" in stats:  # an output that can refuse work (a video's stats say its encoder)
                    outputs.add_metric([label, output], stats["dropped"])
            people.add_metric([label], numbers["people"])
            fps.add_metric([label], numbers["processed_fps"])
            behind.add_metric([label], float(s.waiting.under_load()))
            if numbers["served_share"] is not None:
                served.add_metric([label], numbers["served_share"])
            if s.source.connection is not None:
                up.add_metric([label], float(s.source.connection.up))
        yield from (dropped, outputs, people, fps, behind, served, up)
        cross = self.pipeline.cross
        yield from stage_metrics(
            {s.label: s.stage_reports() for s in streams},
            {s.label: snapshots[id(s)]["errors"] for s in streams},
            cross.reports() if cross is not None else {},
            cross.errors if cross is not None else [],
        )
        device = self.pipeline.loaded.device
        if device.type == "cuda":
            gpu = GaugeMetricFamily("sapiens2_gpu_memory_bytes", "GPU memory the models hold", labels=["device"])
            gpu.add_metric([str(device)], torch.cuda.memory_allocated(device))
            yield gpu


def stage_metrics(
    sources: dict[str, dict], errors: dict[str, list[dict]], group: dict, group_errors: list[dict]
) -> list:
    """What a run's and a fleet's stages tell /metrics, from their reports alone (each source's reporting stages'
    status by source label, each source's failed stages, the group stages' reports and failures): the stages'
    numbers, the events, the group's 3-D, and every stage that failed, for a source or for the group."""
    failed = CounterMetricFamily("sapiens2_stage_errors", "stages that failed for a source (each is off for it "
                                 "since)", labels=["source", "stage"])  # fmt: skip
    for label, stages in errors.items():
        for error in stages:
            failed.add_metric([label, error["stage"]], 1)
    group_failed = CounterMetricFamily("sapiens2_group_stage_errors", "stages across sources that failed (each is "
                                       "off for the rest of the run since)", labels=["stage"])  # fmt: skip
    for error in group_errors:
        group_failed.add_metric([error["stage"]], 1)
    out = [failed, group_failed, stage_status(sources)]
    out += event_metrics((label, r["event_counts"], r["event_counts"]["kinds"]) for label, r in sources.items()
                         if r.get("event_counts"))  # fmt: skip
    if group.get("3d"):  # the triangulate stage's report
        out += mocap_metrics(group["3d"]["last"], group["3d"]["summary"])
    return out


def stage_status(reports: dict[str, dict]) -> GaugeMetricFamily:
    """The numbers at the top level of each reporting stage's status, per source (`Stage.report`)."""
    family = GaugeMetricFamily("sapiens2_stage_status", "what a stage reports of a source (its numbers)",
                               labels=["source", "stage", "key"])  # fmt: skip
    for label, by_key in reports.items():
        for stage, status in by_key.items():
            for key, value in (status or {}).items() if isinstance(status, dict) else ():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    family.add_metric([label, stage, key], float(value))
    return family


def event_metrics(sources: Iterable[tuple[str, dict, dict]]) -> list:
    """Per source with `events:` (label, `EventRules.counts()`, events so far by kind): people in each zone,
    crossings of each line by direction, events by kind."""
    zones = GaugeMetricFamily("sapiens2_zone_people", "people in each zone", labels=["source", "zone"])
    lines = CounterMetricFamily("sapiens2_line_crossings", "crossings of each line, by direction",
                                labels=["source", "line", "direction"])  # fmt: skip
    kinds = CounterMetricFamily("sapiens2_events", "events by kind", labels=["source", "kind"])
    for label, counts, totals in sources:
        for zone, people in counts["zones"].items():
            zones.add_metric([label, zone], people)
        for line, directions in counts["lines"].items():
            for direction, n in directions.items():
                lines.add_metric([label, line, direction], n)
        for kind, n in totals.items():
            kinds.add_metric([label, kind], n)
    return [zones, lines, kinds]


def mocap_metrics(latest: dict, summary: dict) -> list:
    """Live motion capture (several calibrated cameras): the latest moment's people, views per person and
    reprojection error, the latency from a moment's last camera result to its 3-D result, moments each camera
    missed; from `LiveMocap.last` and `.summary()` (in a run, or reported by a fleet's hub)."""
    out = []
    for name, doc, value in (("people", "people triangulated in the latest moment", latest["people"]),
                             ("views_per_person", "cameras per person in the latest moment",
                              latest["views_per_person"]),
                             ("reprojection_px", "mean reprojection error of the latest moment (px)",
                              latest["error_px"]),
                             ("latency_ms", "median time from a moment's last camera result to its 3-D result (ms)",
                              summary["latency_ms"]["p50"])):  # fmt: skip
        family = GaugeMetricFamily(f"sapiens2_3d_{name}", doc)
        family.add_metric([], value)
        out.append(family)
    missing = CounterMetricFamily("sapiens2_3d_moments_missing", "moments a camera had no result for",
                                  labels=["camera"])  # fmt: skip
    for camera, n in summary["moments_missing"].items():
        missing.add_metric([camera], n)
    out.append(missing)
    return out


REQUEST_TIMEOUT_S = 5.0  # a client that stops sending holds the metrics thread no longer than this


class Endpoints:
    """/metrics (Prometheus text from `registry`) and /healthz (`health()` -> status, JSON body) on one port, served
    one request after another by one long-lived thread (answers take milliseconds; no thread per request); used by a
    run and by the fleet's driver."""

    def __init__(self, cfg: MetricsConfig, registry: CollectorRegistry, health) -> None:
        self.registry, self.health = registry, health
        try:
            self.server = HTTPServer((cfg.host, cfg.port), self._handler())
        except OSError as e:
            where = f"{cfg.host}:{cfg.port}"
            raise Sapiens2StreamError(f"runtime.metrics: cannot listen on {where} ({e.strerror})") from None
        self.thread = threading.Thread(target=self.server.serve_forever, name="metrics", daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def _handler(self):
        endpoints = self

        class Handler(BaseHTTPRequestHandler):
            timeout = REQUEST_TIMEOUT_S

            def do_GET(self) -> None:
                if self.path == "/metrics":
                    status, body, kind = 200, generate_latest(endpoints.registry), CONTENT_TYPE_LATEST
                elif self.path == "/healthz":
                    status, data = endpoints.health()
                    body, kind = json.dumps(data).encode(), "application/json"
                else:
                    status, body, kind = 404, b"/metrics or /healthz\n", "text/plain"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        return Handler

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Monitor(Observer):
    """The metrics and health server of one run, an observer of it (`pipeline.Observer`): stage times and frame
    ages are observed as they happen, counters read at scrape time."""

    def __init__(self, pipeline, cfg: MetricsConfig) -> None:
        self.pipeline = pipeline
        self.registry = CollectorRegistry()
        self.registry.register(RunCollector(pipeline))
        self.frame_age = Histogram("sapiens2_frame_age_seconds", "arrival to written, per frame", ["source"],
                                   buckets=AGE_BUCKETS, registry=self.registry)  # fmt: skip
        self.stage = Histogram("sapiens2_stage_seconds", "time per frame in each stage", ["stage"],
                               buckets=STAGE_BUCKETS, registry=self.registry)  # fmt: skip
        self.batch = Histogram("sapiens2_batch_frames", "frames per micro-batch", buckets=BATCH_BUCKETS,
                               registry=self.registry)  # fmt: skip
        self.endpoints = Endpoints(cfg, self.registry, self.health)

    @property
    def port(self) -> int:
        return self.endpoints.port

    def started(self, pipeline) -> list:
        pipeline.times.observer = self.observe_stage
        return []

    def source_added(self, stream) -> None:
        stream.numbers.times.observer = self.observe_stage

    def result(self, result, stream) -> None:
        self.frame_age.labels(stream.label).observe(time.time() - result.frame.wall_s)

    def ended(self) -> None:
        self.close()

    def observe_stage(self, stage: str, ms_per_frame: float, batch: int | None) -> None:
        self.stage.labels(stage).observe(ms_per_frame / 1e3)
        if stage == "infer" and batch:
            self.batch.observe(batch)

    def health(self) -> tuple[int, dict]:
        """200 while every live source is connected and delivered a frame within its timeout; 503 naming the ones
        not connected (connecting, reconnecting, given up: with their state) and the silent ones otherwise."""
        now, sources, silent, down = time.time(), {}, [], {}
        for s in self.pipeline.streams:
            if not s.live or (not s.reading and s.source.connection.state != "gave_up"):
                continue
            if not s.source.connection.up:
                down[s.label] = s.source.connection.state
                continue
            ago = now - (s.source.stats.last_frame_wall or s.numbers.started)
            sources[s.label] = round(ago, 2)
            if ago > s.plan.source.timeout_s:
                silent.append(s.label)
        body = {"status": "not connected" if down else "silent" if silent else "ok",
                "seconds_since_last_frame": sources}  # fmt: skip
        if down:
            body["not_connected"] = down
        if silent:
            body["silent"] = silent
        return (503 if silent or down else 200), body

    def close(self) -> None:
        self.endpoints.close()
