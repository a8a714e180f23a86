"""`run --ray`: the driver of a live fleet. It starts one worker per GPU, places the cameras by measured cost,
watches the workers, moves the cameras of a lost machine to the survivors, and serves one /metrics and /healthz
for the whole fleet. Ray does membership, noticing dead nodes, restarting dead worker processes and giving each
worker its GPU; this module only decides where cameras run and records it.

Every call into a worker has a timeout (a call to a dying node hangs until Ray declares it dead).
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from prometheus_client import CollectorRegistry

from ..config import from_dict
from ..console.events import RecentEvents
from ..errors import Sapiens2StreamError
from ..io.options import SourceConfig
from ..io.sources import Source
from ..runtime.live_mocap import triangulation_group
from ..runtime.options import ConsoleConfig, MetricsConfig
from ..runtime.pipeline import check_group_stages, group_plan
from ..runtime.pipeline_config import PipelineConfig
from ..runtime.prometheus import Endpoints
from ..runtime.ray_cluster import connect, worker_plan
from ..runtime.stages import builtin_stages, in_order
from .health import CameraState, Health, WorkerState
from .metrics import FleetCollector
from .mocap import MocapHub
from .placement import orphan_targets, place
from .record import FleetRecord, write_marker
from .worker import FleetWorker

POLL_S = 1.0
START_TIMEOUT_S = 600.0  # loading the models on every worker
STOP_TIMEOUT_S = 60.0
FRESH_WAIT_S = 120.0  # how long a lost machine's cameras wait for their worker's restart on a free GPU
SEGMENT_S = 600.0  # fleet cameras always write segments: a camera continued elsewhere starts a new one


def camera_rates(cfg: PipelineConfig) -> dict[str, float]:
    """Each camera's frames/s: source.fps, else what its stream says when connected, else fleet.camera_fps. An
    unreachable camera is a configuration error, as in a single-process run."""

    with ThreadPoolExecutor(max_workers=8) as pool:
        rates = pool.map(lambda src: camera_rate(src, cfg.fleet.camera_fps), cfg.sources)
        return dict(zip([s.name for s in cfg.sources], rates, strict=True))


def camera_rate(src: SourceConfig, fallback: float) -> float:
    """One camera's frames/s: source.fps, else what its stream says when connected, else `fallback`."""
    if src.fps:
        return src.fps
    source = Source(src)
    source.connect()
    return source.rate or fallback


class Fleet:
    """The driver's state: the workers, the record, the latest numbers of every camera."""

    def __init__(self, cfg: PipelineConfig, address: str) -> None:
        if cfg.sources is None:
            cfg = cfg.named()
        self.cfg = cfg
        self.out = Path(cfg.outputs.dir).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.id = uuid.uuid4().hex[:8]
        self.local = address == "local"
        self.ray = connect(address, cfg.fleet.detect_s)
        self.record = FleetRecord(self.out)
        self.record.save()
        self.stop = threading.Event()
        self.lock = threading.RLock()  # the record: changed by the watching loop and by the console's thread
        self.workers: dict[str, WorkerState] = {}
        self.unit: tuple[str, float] = ("GPU", 1.0)  # the Ray resource a worker takes, and how much of it
        self.cameras: dict[str, CameraState] = {}
        self.events = RecentEvents()  # the cameras' latest events, as the workers report them (the console's list)
        self.hub = None  # live motion capture's MocapHub, for a calibrated group of cameras
        self.hub_asked = None  # its report asked for
        self.mocap_report: dict | None = None  # its latest report: {"reports": the group stages', "errors": ...}
        self.group_errors_said = 0
        self.endpoints = None
        self.health = Health(self.record, self.workers, self.cameras, cfg.fleet.max_result_age_s)

    # ------------------------------------------------------------------------------------------- starting

    def start(self) -> None:
        ray, fleet = self.ray, self.cfg.fleet
        count, options = worker_plan(ray, fleet.workers, fleet.cpus_per_worker)
        ((option, amount),) = options.items()
        self.unit = ({"num_gpus": "GPU", "num_cpus": "CPU"}[option], float(amount))
        worker_cfg = replace(
            self.cfg,
            outputs=replace(self.cfg.outputs, dir=str(self.out), segment_s=self.cfg.outputs.segment_s or SEGMENT_S),
            runtime=replace(self.cfg.runtime, metrics=MetricsConfig(port=None), console=ConsoleConfig()),
        )
        views = self.cfg.runtime.console.port is not None  # the driver's console relays the workers' live views
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        rates = camera_rates(self.cfg)
        group = triangulation_group(self.cfg.threed, self.cfg.sources or [])
        if group:  # calibrated cameras: triangulated live by one hub on the head node, whichever workers run them
            # (the head is the cluster's single point of failure anyway; a driver's own node id may be a worker's).
            # A hard affinity: a soft one let the head's raylet hand it to a worker node every other time (Ray
            # 2.60, a head without CPUs), where a lost node took the fleet's 3-D stream with it
            head = [n["NodeID"] for n in ray.nodes() if n["Alive"] and "node:__internal_head__" in n["Resources"]]
            here = NodeAffinitySchedulingStrategy(head[0] if head else ray.get_runtime_context().get_node_id(),
                                                  soft=False)  # fmt: skip
            stages = check_group_stages(worker_cfg, in_order(builtin_stages()))
            plan = group_plan(worker_cfg, stages, rates=rates, interrupted=lambda: True)  # a fleet is stopped
            self.hub = ray.remote(MocapHub).options(num_cpus=0, max_concurrency=4, scheduling_strategy=here,
                                                    name=f"sapiens2-fleet-{self.id}-mocap").remote(plan)  # fmt: skip

        nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get(next(iter(options)), 0)]
        actor = ray.remote(FleetWorker)
        driver_job = ray.get_runtime_context().get_job_id()  # detached workers watch it (see worker.py)
        for i in range(count):
            name = f"w{i}"
            spread = NodeAffinitySchedulingStrategy(nodes[i % len(nodes)], soft=True) if nodes else "DEFAULT"
            self.workers[name] = WorkerState(actor.options(
                **options, max_restarts=-1, max_task_retries=0, max_concurrency=8, lifetime="detached",
                name=f"sapiens2-fleet-{self.id}-{name}", scheduling_strategy=spread,
            ).remote(worker_cfg, name, driver_job, views, self.hub))  # fmt: skip
        self.say(f"fleet {self.id}: starting {count} worker(s) ({options}), loading the models")
        infos = self.call_all("info", timeout=START_TIMEOUT_S)
        marker = write_marker(self.out, self.id)
        for name, sees in self.call_all("sees", str(marker)).items():
            if not sees:
                raise Sapiens2StreamError(
                    f"outputs.dir {self.out} is not visible from worker {name} on node {infos[name]['node_id'][:12]}:"
                    " put it on storage every node mounts (NFS, a cluster file system) and use the same path"
                )  # fmt: skip
        capacities = self.call_all("measure", timeout=START_TIMEOUT_S)
        for name, info in infos.items():
            self.record.data["workers"][name] = {**info, "sources": [], "capacity_fps": round(capacities[name], 2)}
        placement = place(rates, capacities, fleet.headroom, pins=fleet.pins,
                          nodes={w: i["node_id"] for w, i in infos.items()})  # fmt: skip
        for cam, worker in placement.assignment.items():
            self.record.assign(cam, worker, infos[worker]["node_id"])
            self.camera(cam).assigned_at = time.time()
        self.record.data["placement"] = {"rates": rates, "load_fps": placement.load, "below_rate": placement.below_rate}
        self.save()
        for cam, share in placement.below_rate.items():
            self.say(f"fleet: {cam} will run at about {share:.0%} of its {rates[cam]:g} frames/s: the fleet "
                     f"cannot carry the load (add workers, lower the rate or use a smaller model)")  # fmt: skip
        self.call_all("sync")
        for worker in self.workers.values():
            worker.seen = time.time()
        metrics = self.cfg.runtime.metrics
        if metrics.port is not None:
            registry = CollectorRegistry()
            registry.register(FleetCollector(self.health, self.lock, lambda: self.mocap_report))
            self.endpoints = Endpoints(metrics, registry, self.healthz)

    # ------------------------------------------------------------------------------------------- calls

    def call_all(self, method: str, *args, timeout: float | None = None) -> dict:
        """One call on every worker not lost, at once; a worker that fails to answer is an error here (start)."""
        names = [name for name, w in self.workers.items() if not w.lost]
        refs = [getattr(self.workers[name].handle, method).remote(*args) for name in names]
        try:
            return dict(zip(names, self.ray.get(refs, timeout=timeout or self.cfg.fleet.detect_s + 30), strict=True))
        except self.ray.exceptions.GetTimeoutError:
            raise Sapiens2StreamError(f"fleet: the workers did not answer {method} in time") from None
        except self.ray.exceptions.RayError as e:
            raise Sapiens2StreamError(f"fleet: a worker failed during {method}: {str(e).splitlines()[0]}") from None

    # ------------------------------------------------------------------------------------------- watching

    def poll(self) -> None:
        """Collect the workers' numbers (at most one call in flight per worker) and act on lost nodes."""
        ray = self.ray
        for worker in self.workers.values():
            if worker.asked is None:
                worker.asked = worker.handle.stats.remote(worker.event_cursor)
        if self.hub is not None and self.hub_asked is None:
            self.hub_asked = self.hub.report.remote()
        asked = [w.asked for w in self.workers.values() if w.asked is not None]
        asked += [self.hub_asked] if self.hub_asked is not None else []
        ready, _ = ray.wait(asked, num_returns=len(asked), timeout=POLL_S)
        now = time.time()
        with self.lock:
            self._take(ready, now)
            if self.hub_asked in ready:
                asked, self.hub_asked = self.hub_asked, None
                try:
                    self.mocap_report = ray.get(asked)
                except ray.exceptions.RayError as e:  # the 3-D stream is lost; the cameras go on
                    self.say(f"fleet: live motion capture's hub is gone ({type(e).__name__})")
                    self.hub = None
                else:
                    self.say_group_errors(self.mocap_report["errors"])

    def say_group_errors(self, errors: list[dict]) -> None:
        """Each group stage's failure the hub reported, said once."""
        for error in errors[self.group_errors_said :]:
            self.say(
                f"fleet: group stage {error['stage']} failed after {error['moment']} moments: {error['error']} "
                "(the stage is off for the rest of the run; the cameras and the other stages go on)"
            )
        self.group_errors_said = max(self.group_errors_said, len(errors))

    def _take(self, ready: list, now: float) -> None:
        """The answers that came, and what they say about lost nodes (under the record's lock)."""
        ray = self.ray
        for name, state in self.workers.items():
            if state.asked is None or state.asked not in ready:
                continue
            ref, state.asked = state.asked, None
            try:
                stats = ray.get(ref)
            except ray.exceptions.RayError:
                continue  # restarting or gone: Ray decides, the next poll asks again
            state.stats, state.seen = stats, now
            self.update_worker(name, stats)
            self.take_events(name, stats)
            for cam, c in stats["cameras"].items():
                if c["result_age_s"] is not None:
                    self.camera(cam).result_wall = now - c["result_age_s"]
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        for name, worker in self.record.data["workers"].items():
            since = self.workers[name].awaited_since
            if not self.workers[name].lost and worker["node_id"] not in alive:
                self.rehome(name, f"node {worker['node_id'][:12]} lost")
            elif since is not None and now - since > FRESH_WAIT_S:
                self.rehome(name, f"{name} not restarted within {FRESH_WAIT_S:g} s", fresh=False)

    def take_events(self, name: str, stats: dict) -> None:
        """The events a worker's answer brings (those after the last taken from it), each camera's snapshots in
        its own folder."""
        events = stats.pop("events", [])
        if events:
            self.workers[name].event_cursor = (stats["pid"], events[-1]["seq"])
        for event in events:
            own = {k: v for k, v in event.items() if k not in ("seq", "snapshot_url")}  # numbered again here
            self.events.add([own], self.out / event["source"])

    def update_worker(self, name: str, stats: dict) -> None:
        """A worker answered: note where it runs now (Ray may have restarted it, on this node or another)."""
        worker = self.record.data["workers"][name]
        changed = worker["pid"] != stats["pid"] or worker["node_id"] != stats["node_id"]
        mine = sorted(stats["cameras"])
        if changed or worker["sources"] != mine:
            if changed:
                self.say(f"fleet: {name} is back (pid {stats['pid']}, node {stats['node_id'][:12]})")
            worker.update(pid=stats["pid"], node_id=stats["node_id"], gpus=stats["gpus"], sources=mine)
            for cam in mine:
                if cam in self.record.data["sources"]:  # (one removed at the console may still be stopping)
                    self.record.data["sources"][cam]["node_id"] = stats["node_id"]
            state = self.workers[name]
            if state.lost and worker["node_id"] in {n["NodeID"] for n in self.ray.nodes() if n["Alive"]}:
                state.lost = False  # restarted on a living node: it runs the cameras left for it, if any
                state.awaited_since = None
            self.save()

    def rehome(self, lost: str, reason: str, fresh: bool = True) -> None:
        """Move a lost worker's cameras onto the others' spare capacity (first-fit decreasing), new epochs. Those
        that would crowd a survivor past its capacity wait instead for the lost worker, when the cluster has a
        free GPU (or CPUs) for Ray to restart it on (`fresh`; for at most FRESH_WAIT_S)."""
        state = self.workers[lost]
        state.lost, state.awaited_since = True, None
        orphans = [c for c, s in self.record.data["sources"].items() if s["worker"] == lost]
        self.record.data["workers"][lost]["sources"] = []
        survivors = self.capacities()
        if not orphans:
            self.save()
            return
        targets = dict.fromkeys(orphans, lost)  # lost: left for its restart on a free GPU
        if survivors:
            current = {c: s["worker"] for c, s in self.record.data["sources"].items() if s["worker"] != lost}
            targets = orphan_targets(orphans, lost, self.record.data["placement"]["rates"], current, survivors,
                                     self.cfg.fleet.headroom, fresh and self.room_for_restart())  # fmt: skip
        elif not (fresh and self.room_for_restart()):
            self.say(f"fleet: {reason}; no worker left for {', '.join(orphans)} (Ray restarts {lost} when it can)")
            return
        for cam, target in targets.items():
            why = f"{reason}; waits for {lost} restarted on a free {self.unit[0]}" if target == lost else reason
            node = "" if target == lost else self.record.data["workers"][target]["node_id"]
            self.record.assign(cam, target, node, why)
            self.camera(cam).assigned_at = time.time()
        if lost in targets.values():
            state.awaited_since = time.time()
        self.save()
        self.say(f"fleet: {reason}: moved " + ", ".join(f"{c} -> {t}" for c, t in targets.items()))
        for target in set(targets.values()):
            self.workers[target].handle.sync.remote()  # a restarting worker reads fleet.json in its constructor anyway

    def room_for_restart(self) -> bool:
        """Whether the living nodes have the resources of one more worker than the fleet still has."""
        resource, amount = self.unit
        total = sum(n["Resources"].get(resource, 0) for n in self.ray.nodes() if n["Alive"])
        return total - amount * sum(not w.lost for w in self.workers.values()) >= amount

    def capacities(self) -> dict[str, float]:
        """The measured frames/s of every worker not lost."""
        return {w: i["capacity_fps"] for w, i in self.record.data["workers"].items() if not self.workers[w].lost}

    def camera(self, name: str) -> CameraState:
        return self.cameras.setdefault(name, CameraState())

    def save(self) -> None:
        self.record.save()

    # ------------------------------------------------------------------------------------------- the console

    def camera_sources(self) -> list[SourceConfig]:
        """The `sources:` entries of every camera of the fleet now (those of the YAML and those added)."""
        with self.lock:
            added = {n: from_dict(SourceConfig, e, n) for n, e in self.record.data.get("added", {}).items()}
            known = {s.name: s for s in self.cfg.sources} | added
            return [known[c] for c in self.record.data["sources"] if c in known]

    def add_camera(self, entry: dict) -> None:
        """A camera added at the console: placed like any other (first-fit decreasing on the measured capacities,
        the headroom kept), recorded with its `sources:` entry, started by its worker."""
        source = from_dict(SourceConfig, entry, "source")
        rate = camera_rate(source, self.cfg.fleet.camera_fps)
        with self.lock:
            data = self.record.data
            capacities = self.capacities()
            if not capacities:
                raise Sapiens2StreamError("no worker is up to take a camera now")
            rates = data["placement"]["rates"] | {source.name: rate}
            current = {c: s["worker"] for c, s in data["sources"].items()}
            nodes = {w: data["workers"][w]["node_id"] for w in capacities}
            placement = place({c: rates[c] for c in [*current, source.name]}, capacities, self.cfg.fleet.headroom,
                              current, self.cfg.fleet.pins, nodes)  # fmt: skip
            worker = placement.assignment[source.name]
            data.setdefault("added", {})[source.name] = entry
            data["placement"]["rates"] = rates
            self.record.assign(source.name, worker, data["workers"][worker]["node_id"])
            self.camera(source.name).assigned_at = time.time()
            self.save()
        self.say(f"fleet: {source.name} added on {worker}")
        self.ray.get(self.workers[worker].handle.sync.remote(), timeout=self.cfg.fleet.detect_s + 30)

    def remove_camera(self, camera: str) -> None:
        """A camera removed at the console: its worker stops it (outputs complete) and the record forgets it."""
        with self.lock:
            worker = self.record.data["sources"][camera]["worker"]
            self.record.release(camera)
            self.cameras.pop(camera, None)
            self.save()
        self.say(f"fleet: {camera} removed from {worker}")
        if not self.workers[worker].lost:
            self.ray.get(self.workers[worker].handle.sync.remote(), timeout=STOP_TIMEOUT_S)

    # ------------------------------------------------------------------------------------------- reporting

    def healthz(self) -> tuple[int, dict]:
        """/healthz, under the record's lock (`Health.status`)."""
        with self.lock:
            return self.health.status()

    def status_lines(self) -> list[str]:
        return self.health.lines((self.mocap_report or {}).get("errors", []))

    def say(self, line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    # ------------------------------------------------------------------------------------------- stopping

    def shutdown(self) -> dict:
        """Stop every camera (outputs complete), then the workers; the fleet's summary."""
        ray = self.ray
        refs = {name: w.handle.stop.remote() for name, w in self.workers.items() if not w.lost}
        sources = {}
        for name, ref in refs.items():
            try:
                sources.update(ray.get(ref, timeout=STOP_TIMEOUT_S))
            except ray.exceptions.RayError as e:
                self.say(f"fleet: {name} did not stop cleanly ({type(e).__name__})")
        for worker in self.workers.values():
            ray.kill(worker.handle, no_restart=True)
        mocap = {}
        if self.hub is not None:  # after the cameras: their last results are in
            try:
                mocap = ray.get(self.hub.close.remote(), timeout=STOP_TIMEOUT_S)
                self.say_group_errors(mocap["errors"])
            except ray.exceptions.RayError as e:
                self.say(f"fleet: live motion capture did not close cleanly ({type(e).__name__})")
            ray.kill(self.hub, no_restart=True)
        if self.endpoints is not None:
            self.endpoints.close()
        totals = {
            "frames_in": sum(s["frames_in"] for s in sources.values()),
            "frames_out": sum(s["frames_out"] for s in sources.values()),
        }
        errors = [{"source": cam, **e} for cam, summary in sources.items() for e in summary.get("errors", [])]
        errors += mocap.pop("errors", [])  # a group stage's: {stage, error, moment}
        return {"fleet": self.id, "workers": self.record.data["workers"], "sources": sources, "totals": totals,
                "moves": self.record.data["moves"], **mocap, "errors": errors, "interrupted": True}  # fmt: skip

    def close(self) -> None:
        if self.local:
            self.ray.shutdown()
        (self.out / f".fleet-marker-{self.id}").unlink(missing_ok=True)


class FleetConsole:
    """runtime.console for a fleet: the console on a thread of the driver with an event loop of its own."""

    def __init__(self, fleet: Fleet) -> None:
        from ..console.server import Console
        from .console_backend import FleetBackend

        self.console = Console(FleetBackend(fleet), fleet.cfg.runtime.console)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self.console.serve(),),
                                       name="fleet-console", daemon=True)  # fmt: skip

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.console.close)
        self.thread.join(10)


def run_fleet(cfg: PipelineConfig, address: str, progress: bool = True) -> dict:
    """Run the cameras of `cfg` on a Ray fleet until Ctrl-C or SIGTERM; returns the fleet's summary."""
    fleet = Fleet(cfg, address)
    console = FleetConsole(fleet) if cfg.runtime.console.port is not None else None  # its port taken first
    installed = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            installed[sig] = signal.signal(sig, lambda *_: fleet.stop.set())
    try:
        try:
            fleet.start()
        except BaseException:
            for worker in fleet.workers.values():
                fleet.ray.kill(worker.handle, no_restart=True)
            raise
        if console is not None:
            console.thread.start()
        last_status = 0.0
        while not fleet.stop.is_set():
            fleet.poll()
            if progress and time.time() - last_status > 5:
                last_status = time.time()
                fleet.say("\n".join(fleet.status_lines()))
        return fleet.shutdown()
    finally:
        for sig, handler in installed.items():
            signal.signal(sig, handler)
        if console is not None and console.thread.is_alive():
            console.close()
        fleet.close()
