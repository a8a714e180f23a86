"""A fleet's numbers for Prometheus (the driver's /metrics): per camera and worker, labelled with source, worker
and node, and what the cameras' and the hub's stages report (`runtime.prometheus.stage_metrics`, as a run's)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..runtime.prometheus import stage_metrics
from ..runtime.stages.base import report_keys
from .health import Health


class FleetCollector:
    """Per camera and worker numbers for Prometheus, labelled with source, worker and node."""

    def __init__(self, health: Health, lock: threading.RLock, hub_report: Callable[[], dict | None]) -> None:
        """`health`: the driver's (its record and workers too); `lock`: the record's; `hub_report`: the hub's latest
        report (None: none yet, or no camera group)."""
        self.health, self.lock, self.hub_report = health, lock, hub_report

    def collect(self):
        with self.lock:
            return list(self._families())

    def _families(self):
        health, now = self.health, time.time()
        record, workers = health.record, health.workers
        labels = ["source", "worker", "node"]
        written = CounterMetricFamily("sapiens2_frames_written", "frames written to the outputs", labels=labels)
        fps = GaugeMetricFamily("sapiens2_processed_fps", "frames processed per second", labels=labels)
        age = GaugeMetricFamily("sapiens2_result_age_seconds", "seconds since the latest result", labels=labels)
        owned = GaugeMetricFamily("sapiens2_source_owned", "1 while a living worker runs the camera", labels=labels)
        for cam, where in record.data["sources"].items():
            worker = where["worker"]
            key = [cam, worker, where["node_id"]]
            c = workers[worker].stats["cameras"].get(cam) if worker in workers else None
            written.add_metric(key, c["frames_out"] if c else 0)
            fps.add_metric(key, c["processed_fps"] if c else 0.0)
            age.add_metric(key, health.result_age(cam, now))
            owned.add_metric(key, float(health.owner_alive(cam)))
        capacity = GaugeMetricFamily("sapiens2_worker_capacity_fps", "frames/s a worker measured",
                                     labels=["worker", "node"])  # fmt: skip
        for name, worker in record.data["workers"].items():
            capacity.add_metric([name, worker["node_id"]], worker["capacity_fps"])
        yield from (written, fps, age, owned, capacity)
        cameras = {cam: c for w in workers.values() for cam, c in w.stats["cameras"].items()}
        reports = {cam: {k: c[k] for k in report_keys() if c.get(k) is not None} for cam, c in cameras.items()}
        hub = self.hub_report() or {"reports": {}, "errors": []}
        yield from stage_metrics(
            reports, {cam: c.get("errors", []) for cam, c in cameras.items()}, hub["reports"], hub["errors"]
        )
