"""The live fleet on Ray: placement as a pure function, then a real multi-node Ray cluster on this machine (a
head and two nodes that declare one GPU each, health checks tuned so a lost node is noticed in about 3 s),
camera-paced lavfi sources, tiny models on the CPU, and the real `sapiens2-stream run --ray` driver: a worker
SIGKILLed, a node killed without grace, the driver stopped by Ctrl-C or killed. Everything stays on 127.0.0.1."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import av
import pytest
import yaml
from websockets.sync.client import connect

from sapiens2_stream.fleet.placement import orphan_targets, place
from tests.test_integrations import wait_until
from tests.test_pipeline import free_port

# ------------------------------------------------------------------------------------------- placement


def test_first_fit_decreasing_keeps_the_headroom_and_one_owner_per_camera():
    demands = {"a": 6.0, "b": 5.0, "c": 3.0, "d": 2.0}
    p = place(demands, {"w0": 10.0, "w1": 10.0}, headroom=0.2)
    assert set(p.assignment) == set(demands)  # every camera exactly one owner
    assert p.assignment == {"a": "w0", "b": "w1", "c": "w1", "d": "w0"}  # largest first, first fit within 8
    assert all(load <= 8.0 for load in p.load.values()) and not p.below_rate


def test_healthy_cameras_never_move_and_a_lost_workers_cameras_use_the_headroom():
    demands = {"a": 4.0, "b": 4.0, "c": 3.0, "d": 3.0}
    first = place(demands, {"w0": 10.0, "w1": 10.0, "w2": 10.0}, headroom=0.3)
    lost = first.assignment["a"]
    survivors = {w: 10.0 for w in ("w0", "w1", "w2") if w != lost}
    current = {c: w for c, w in first.assignment.items() if w != lost}
    again = place(demands, survivors, 0.3, current, use_headroom=True)
    assert all(again.assignment[c] == w for c, w in current.items())  # not one healthy camera moved
    assert all(w in survivors for w in again.assignment.values()) and not again.below_rate
    assert all(load <= 10.0 for load in again.load.values())


def test_an_overloaded_fleet_still_places_everything_and_says_how_far_below_rate():
    p = place({"a": 10.0, "b": 10.0, "c": 10.0}, {"w0": 10.0, "w1": 10.0}, headroom=0.2)
    assert set(p.assignment) == {"a", "b", "c"}
    crowded = max(p.load, key=p.load.get)
    assert p.load[crowded] == 20.0
    assert p.below_rate == {c: 0.5 for c, w in p.assignment.items() if w == crowded}


def test_a_camera_faster_than_any_worker_demands_what_one_worker_serves_in_the_latency_budget():
    # 60 frames/s against workers that serve 20 within the budget: the camera fills one worker (not three), runs at
    # a third of its rate, and the small camera goes to the other worker untouched
    p = place({"fast": 60.0, "slow": 5.0}, {"w0": 20.0, "w1": 20.0}, headroom=0.2)
    assert p.load[p.assignment["fast"]] == 20.0 and p.assignment["slow"] != p.assignment["fast"]
    assert p.below_rate == {"fast": 0.333}
    # and on a worker crowded as well, both shares multiply: 20 of 60 served, then half of that worker's load
    crowded = place({"fast": 60.0, "other": 20.0}, {"w0": 20.0}, headroom=0.0)
    assert crowded.below_rate == {"fast": round(20 / 60 * 0.5, 3), "other": 0.5}


@pytest.mark.parametrize("budget_s,capacity", [(1.0, 4 / 0.3), (0.2, 1 / 0.15)])
def test_a_worker_measures_its_capacity_in_the_batches_live_cameras_get(tmp_path, tiny_dir, budget_s, capacity):
    """With batches costing 0.1 s + 0.05 s a frame, a 1 s budget gives live cameras batches of 4 (the maximum),
    a 0.2 s budget single frames: the capacity is what the worker serves at that size, not at some other."""
    from sapiens2_stream.fleet.worker import FleetWorker
    from sapiens2_stream.runtime.pipeline_config import load_config

    cfg = load_config(fleet_spec(tmp_path, tiny_dir, ["c1"], None), [f"runtime.max_frame_age_s={budget_s}"])
    worker = FleetWorker(cfg, "w0")  # outside Ray, no fleet.json: no camera to start
    try:
        assert worker.node == "local" and not ray_initialized()  # Ray was not started (nor joined) for it
        assert worker._seconds_per_batch(2) > 0  # the real measurement runs on the loaded models
        worker._seconds_per_batch = lambda size: 0.1 + 0.05 * size
        assert worker.measure() == pytest.approx(capacity)
    finally:
        worker.stop()


def ray_initialized() -> bool:
    import ray

    return ray.is_initialized()


def test_a_lost_worker_s_cameras_that_would_crowd_a_survivor_wait_for_its_restart_when_a_gpu_is_free():
    rates = {"a": 10.0, "b": 10.0, "c": 10.0, "d": 10.0}
    current = {"a": "w0", "b": "w0"}  # w1 lost with c and d; w0 carries 24 frames/s
    assert orphan_targets(["c", "d"], "w1", rates, current, {"w0": 24.0}, 0.2, wait=True) == {"c": "w1", "d": "w1"}
    assert orphan_targets(["c", "d"], "w1", rates, current, {"w0": 24.0}, 0.2, wait=False) == {"c": "w0", "d": "w0"}
    roomy = orphan_targets(["c", "d"], "w1", rates, current, {"w0": 24.0, "w2": 24.0}, 0.2, wait=True)
    assert roomy == {"c": "w2", "d": "w2"}  # room without crowding: moved, not kept waiting


def test_pins_are_tried_first():
    p = place({"a": 1.0, "b": 1.0}, {"w0": 10.0, "w1": 10.0}, pins={"b": "node-1"},
              nodes={"w0": "node-0", "w1": "node-1"})  # fmt: skip
    assert p.assignment["b"] == "w1" and p.assignment["a"] == "w0"


# ------------------------------------------------------------------------------------------- on a cluster

# the README's `ray start --system-config`: lost nodes noticed in about 3 s, workers at normal priority
HEALTH = {"health_check_period_ms": 1000, "health_check_timeout_ms": 1000, "health_check_failure_threshold": 3,
          "worker_niceness": 0}  # fmt: skip
DETECT_S = 4.0


@pytest.fixture(scope="module")
def cluster():
    ray_cluster_utils = pytest.importorskip("ray.cluster_utils")
    temp = tempfile.mkdtemp(prefix="rayf", dir="/tmp")  # short: Ray's socket paths must fit 107 characters
    os.makedirs("/tmp/ray", exist_ok=True)  # where Ray notes the cluster's address (made by an earlier Ray, or not)
    cluster = ray_cluster_utils.Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "node_ip_address": "127.0.0.1", "temp_dir": temp, "include_dashboard": False,
        "_system_config": HEALTH})  # fmt: skip
    nodes = [cluster.add_node(num_cpus=1, num_gpus=1, node_ip_address="127.0.0.1") for _ in range(2)]
    cluster.wait_for_nodes()
    yield cluster, nodes
    pids = [p.process.pid for n in [cluster.head_node, *cluster.worker_nodes] for procs in n.all_processes.values()
            for p in procs]  # fmt: skip
    cluster.shutdown()
    time.sleep(1)
    assert not [pid for pid in pids if alive(pid)], "Ray processes left after shutdown"
    shutil.rmtree(temp, ignore_errors=True)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


def fleet_spec(tmp_path, tiny_dir, cameras, port):
    spec = tmp_path / "fleet.yaml"
    spec.write_text(yaml.safe_dump({
        "sources": [{"name": c, "uri": "lavfi:testsrc2=size=320x240:rate=2,realtime"} for c in cameras],
        "detector": {"type": "fixed", "boxes": [[40, 40, 60, 150], [180, 50, 60, 150]]},
        "models": {"pose": {"source": str(tiny_dir["pose"]), "input_size": [128, 96], "flip": "off"}},
        "outputs": {"dir": str(tmp_path / "out"), "tracks": {"enabled": True}},
        "runtime": {"device": "cpu", "threads": 1, "metrics": {"port": port}},
        "fleet": {"detect_s": DETECT_S, "max_result_age_s": 6.0},
    }))  # fmt: skip
    return spec


def calibrated_fleet_spec(tmp_path, tiny_dir, count, port):
    """`fleet_spec` of `count` cameras of one calibrated rig (tests.scenes3d), triangulated live: the spec's path,
    its data (to change and write back) and the cameras' names."""
    from sapiens2_stream.threed.calibration import write_calibration
    from tests import scenes3d

    rig = scenes3d.rig(count)
    cameras = [c.name for c in rig]
    write_calibration(tmp_path / "Calib.toml", rig)
    spec = fleet_spec(tmp_path, tiny_dir, cameras, port)
    data = yaml.safe_load(spec.read_text())
    data["threed"] = {"calibration": str(tmp_path / "Calib.toml"), "max_skew_s": 0.45}  # 2 frames/s, not in step
    return spec, data, cameras


def start_driver(spec, cluster):
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    return subprocess.Popen([sys.executable, "-m", "sapiens2_stream.cli", "run", str(spec), "--ray", cluster.address,
                             "--no-progress"], stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip


def records(camera_dir):
    """Every complete JSON line of every segment of a camera, in order of writing."""
    out = []
    for path in sorted(camera_dir.glob("*/results.jsonl")):
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return sorted(out, key=lambda r: r["wall"])


def moment_views(out, start: float, end: float = float("inf")) -> list[set]:
    """The cameras of each live 3-D moment written so far (whole lines) with a capture time between `start` and
    `end`."""
    from sapiens2_stream.io.records import parse_lines

    path = out / "3d" / "keypoints_3d.jsonl"
    moments = parse_lines(path.read_bytes())[0] if path.exists() else []
    return [set(m["views"]) for m in moments if start < m["time"] < end]


def health(port):
    """(status, body) of the driver's /healthz; (None, {}) when it did not answer (it answers one request at a time;
    a connection reset was met once, its cause not found)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None, {}


def played_frames(path):
    """Frames a player decodes from a video. A worker killed before its segment's first frame reached the video
    (the JSON line is written first) leaves no video: none played."""
    if not path.exists():
        return 0
    with av.open(str(path)) as video:
        return sum(1 for _ in video.decode(video=0))


def playable_yet(path) -> bool:
    """Whether a video being written already plays a frame (a file just opened has no header yet: not yet)."""
    try:
        return played_frames(path) > 0
    except av.error.InvalidDataError:
        return False


def fleet_record(out):
    return json.loads((out / "fleet.json").read_text())


def test_fleet_places_restarts_moves_and_stops(tmp_path, tiny_dir, cluster):
    """Four cameras on two workers; a worker killed (Ray restarts it), then a node lost (its cameras move). The
    cameras are one calibrated group, triangulated live by the driver's hub from whichever worker runs them."""
    ray_cluster, nodes = cluster
    port = free_port()
    out = tmp_path / "out"
    spec, data, cameras = calibrated_fleet_spec(tmp_path, tiny_dir, 4, port)
    data["fleet"]["pins"] = {c: nodes[i // 2].node_id for i, c in enumerate(cameras)}  # two cameras a worker
    spec.write_text(yaml.safe_dump(data))
    driver = start_driver(spec, ray_cluster)
    try:
        wait_until(lambda: all(records(out / c) for c in cameras), 240, "every camera's first results")

        def placed() -> list:
            return sorted(c for w in fleet_record(out)["workers"].values() for c in w["sources"])

        # fleet.json is rewritten as the workers report in: on a busy machine after the first results
        wait_until(lambda: placed() == cameras, 60, "fleet.json naming every camera's worker")
        record = fleet_record(out)
        # placement: one owner per camera, one worker per (declared) GPU, each with its own device
        workers = record["workers"]
        assert len(workers) == 2 and sorted(c for w in workers.values() for c in w["sources"]) == cameras
        assert len({(w["node_id"], w["gpus"]) for w in workers.values()}) == 2
        assert all(w["gpus"] == "0" for w in workers.values())  # CUDA_VISIBLE_DEVICES set by Ray, per node
        loads = record["placement"]["load_fps"]
        assert all(loads[w] <= workers[w]["capacity_fps"] for w in workers) or record["placement"]["below_rate"]
        wait_until(lambda: health(port)[0] == 200, 10, "/healthz 200 once every camera has results")

        # a worker process SIGKILLed: Ray restarts it, it takes its cameras back, each in a new segment
        victim = next(w for w, info in workers.items() if info["sources"])
        old_pid = workers[victim]["pid"]
        os.kill(old_pid, signal.SIGKILL)
        killed = time.time()
        wait_until(lambda: fleet_record(out)["workers"][victim]["pid"] != old_pid, 120, "the worker's restart")
        for cam in workers[victim]["sources"]:
            wait_until(lambda cam=cam: records(out / cam)[-1]["wall"] > killed, 120, f"{cam} writing again")
        back = max(next(r["wall"] for r in records(out / c) if r["wall"] > killed) for c in workers[victim]["sources"])
        assert not fleet_record(out)["moves"]  # restarted in place: nothing moved
        wait_until(lambda: set(cameras) in moment_views(out, back), 30, "moments of all four views again")

        # a node killed without grace: its cameras move to the survivor within detect_s + 10 s
        record = fleet_record(out)
        lost_worker = next(w for w, info in record["workers"].items() if info["sources"])
        lost_node = record["workers"][lost_worker]["node_id"]
        orphans = record["workers"][lost_worker]["sources"]
        survivors = [c for c in cameras if c not in orphans]
        node = next(n for n in nodes if n.node_id == lost_node)
        ray_cluster.remove_node(node, allow_graceful=False)
        gone = time.time()
        unhealthy = []
        while time.time() - gone < DETECT_S + 10:
            status, body = health(port)
            if status == 503:
                unhealthy.append(body)
            if all(records(out / c)[-1]["wall"] > gone + 1 for c in orphans):
                break
            time.sleep(0.25)
        assert all(records(out / c)[-1]["wall"] > gone for c in orphans), "orphans not writing within detect_s + 10 s"
        assert unhealthy and set(orphans) <= set(unhealthy[0].get("no_owner", []) + unhealthy[0].get(
            "no_fresh_result", []))  # fmt: skip
        wait_until(lambda: health(port)[0] == 200, 30, "/healthz back to 200")
        moves = fleet_record(out)["moves"]
        assert sorted(m["source"] for m in moves) == sorted(orphans)
        assert all(m["from"] == lost_worker and "lost" in m["reason"] for m in moves)
        wait_until(lambda: set(cameras) in moment_views(out, gone), 30,
                   "moments of all four views once the lost node's cameras are re-homed")  # fmt: skip
    finally:
        driver.send_signal(signal.SIGINT)
        _, stderr = driver.communicate(timeout=120)
    assert driver.returncode == 130, stderr
    final = fleet_record(out)

    # live 3-D: all four views, the survivors' while a worker's cameras were down, all four again after (above:
    # after the restart, and once a lost node's cameras were re-homed)
    others = set(cameras) - set(workers[victim]["sources"])
    assert set(cameras) in moment_views(out, 0, killed) and set(cameras) in moment_views(out, back, gone)
    assert others in moment_views(out, killed + 0.5, back - 0.5)  # the stream went on from the surviving views
    assert json.loads((out / "summary.json").read_text())["live_mocap"]["cameras"] == cameras

    # surviving cameras were not disturbed: no gap over 2 s around the node's loss (on a busy host, no gap over
    # 1.5 times the largest one the camera had anyway in the 20 s before)
    for cam in survivors:
        walls = [r["wall"] for r in records(out / cam)]
        before = [w for w in walls if gone - 20 < w < gone]
        around = [w for w in walls if gone - 1 < w < gone + DETECT_S + 10]
        usual = max(b - a for a, b in zip(before, before[1:], strict=False))
        assert around and max(b - a for a, b in zip(around, around[1:], strict=False)) < max(2.0, 1.5 * usual), cam
    for cam in cameras:
        recs = records(out / cam)
        frames = [r["frame"] for r in recs]
        assert len(frames) == len(set(frames)), f"{cam}: a frame index written twice"
        assert frames == sorted(frames)
        writers = [json.loads(line) for line in (out / cam / "writers.jsonl").read_text().splitlines()]
        # never two writers: epochs only grow, each epoch has one worker, and a worker wrote only its epochs
        epochs = [w["epoch"] for w in writers]
        assert epochs == sorted(epochs) and len({(w["epoch"], w["worker"]) for w in writers}) == len(set(epochs))
        assert epochs[-1] == final["sources"][cam]["epoch"]
        segments = sorted(p for p in (out / cam).iterdir() if p.is_dir())
        for segment in segments:  # every segment plays: those of killed workers up to about their last second
            lines = (segment / "results.jsonl").read_text().count("\n")
            assert played_frames(segment / "annotated.mp4") <= lines
        assert played_frames(segments[-1] / "annotated.mp4") == lines  # the last one was closed whole
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(summary["sources"]) == cameras and summary["moves"] == final["moves"]
    pids = [w["pid"] for w in final["workers"].values()] + [old_pid]
    wait_until(lambda: not any(alive(p) for p in pids), 20, "the workers' processes to end")


def test_a_killed_driver_s_workers_close_their_cameras_and_end(tmp_path, tiny_dir, cluster):
    """The driver SIGKILLed: its workers (detached actors) notice from Ray's job table, stop their cameras as a
    Ctrl-C would (the video closed whole: every written frame plays) and end, within seconds."""
    ray_cluster, _ = cluster
    spec = fleet_spec(tmp_path, tiny_dir, ["solo"], free_port())
    data = yaml.safe_load(spec.read_text())
    data["fleet"]["workers"] = 1
    spec.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    driver = start_driver(spec, ray_cluster)
    try:
        videos = lambda: (out / "solo").glob("*/annotated.mp4")  # noqa: E731
        wait_until(lambda: any(playable_yet(v) for v in videos()), 240, "a playable video")
        segment = next(p for p in (out / "solo").iterdir() if p.is_dir())
    finally:
        driver.kill()
        driver.wait()
    pids = [w["pid"] for w in fleet_record(out)["workers"].values()]
    killed = time.time()
    wait_until(lambda: not any(alive(p) for p in pids), 30, "the workers to end with their driver")
    assert time.time() - killed < 15
    lines = (segment / "results.jsonl").read_text()
    assert lines.endswith("\n")  # whole lines
    assert played_frames(segment / "annotated.mp4") == lines.count("\n")  # closed whole, not cut off
    assert [p for p in (out / "solo").iterdir() if p.is_dir()] == [segment]  # not restarted after the driver died


def test_a_lost_machine_s_cameras_that_would_crowd_the_survivor_go_to_a_fresh_worker_on_a_free_gpu(
    tmp_path, tiny_dir, cluster
):
    """Two workers each carrying a camera that needs a whole worker (declared 1000 frames/s), and a third GPU
    free: when one worker's node dies, its camera does not crowd the survivor, it waits for Ray to restart its
    worker on the free GPU and continues there; the survivor's camera stays where it was."""
    ray_cluster, _ = cluster
    for _ in range(2):
        ray_cluster.add_node(num_cpus=1, num_gpus=1, node_ip_address="127.0.0.1")
    ray_cluster.wait_for_nodes()
    cameras = ["f1", "f2"]
    spec = fleet_spec(tmp_path, tiny_dir, cameras, free_port())
    data = yaml.safe_load(spec.read_text())
    data["fleet"]["workers"] = 2
    for source in data["sources"]:
        source["fps"] = 1000.0
    spec.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    driver = start_driver(spec, ray_cluster)
    try:
        wait_until(lambda: all(records(out / c) for c in cameras), 240, "every camera's first results")
        record = fleet_record(out)
        assert sorted(len(w["sources"]) for w in record["workers"].values()) == [1, 1]  # a worker each
        lost = next(iter(record["workers"]))
        lost_node, orphan = record["workers"][lost]["node_id"], record["workers"][lost]["sources"][0]
        survivor = next(c for c in cameras if c != orphan)
        ray_cluster.remove_node(next(n for n in ray_cluster.worker_nodes if n.node_id == lost_node), False)
        restarted = lambda: fleet_record(out)["workers"][lost]["node_id"] != lost_node  # noqa: E731
        wait_until(restarted, DETECT_S + 120, f"{lost} restarted elsewhere")  # a new process: slow on a busy host
        back = time.time()
        wait_until(lambda: records(out / orphan)[-1]["wall"] > back, 30, f"{orphan} writing again")
    finally:
        driver.send_signal(signal.SIGINT)
        _, stderr = driver.communicate(timeout=120)
    assert driver.returncode == 130, stderr
    final = fleet_record(out)
    assert final["sources"][orphan]["worker"] == lost and final["workers"][lost]["node_id"] not in (
        lost_node, record["workers"][final["sources"][survivor]["worker"]]["node_id"])  # fmt: skip
    assert final["sources"][survivor] == record["sources"][survivor]  # not moved, same epoch
    (move,) = final["moves"]
    assert move["source"] == orphan and move["from"] == move["to"] == lost and "free GPU" in move["reason"]
    frames = [r["frame"] for r in records(out / orphan)]
    assert frames == sorted(set(frames))  # continued, no frame index twice


def test_ray_local_starts_its_own_instance_beside_a_running_cluster(cluster):
    """`--ray local` on a machine where a Ray cluster already runs (another user's, another test's) must not join
    it: Ray's own default for a bare init is to connect to the machine's current cluster."""
    ray_cluster, _ = cluster
    code = ("import os; from sapiens2_stream.runtime.ray_cluster import connect; ray = connect('local'); "
            "print('GCS', ray.get_runtime_context().gcs_address); "
            "print('NICE', ray.get(ray.remote(lambda: os.nice(0)).remote()))")  # fmt: skip
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    said = dict(line.split(maxsplit=1) for line in done.stdout.splitlines() if line.startswith(("GCS", "NICE")))
    assert said["GCS"] != ray_cluster.address
    assert said["NICE"] == "0"  # its workers at the normal priority (Ray's default, 15, starves them when busy)


def descendants(pid: int) -> list[int]:
    """A process and every process under it, from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo.extend(children.get(found[-1], []))
    return found


def test_the_driver_serves_one_console_for_every_camera_and_places_new_ones(tmp_path, tiny_dir, cluster):
    """`run --ray ... --console PORT`: every camera with its worker and node; a camera added over REST is placed and
    written by its worker; its live view relayed from the worker decodes; removed, its folder stays complete. The
    events of a camera with `events:` are listed by the driver with their snapshots, and counted in /metrics."""
    from tests.test_console import call, sources

    ray_cluster, _ = cluster
    spec = fleet_spec(tmp_path, tiny_dir, ["c1", "c2"], free_port())
    data = yaml.safe_load(spec.read_text())
    data["fleet"]["workers"] = 2
    data["runtime"]["console"] = {"port": free_port()}
    data["sources"][0]["events"] = {"zones": {"bay": {"polygon": [[0, 0], [1, 0], [1, 1], [0, 1]],
                                                      "anchor": "box_bottom"}}}  # fmt: skip  # both people enter
    spec.write_text(yaml.safe_dump(data))
    port, out = data["runtime"]["console"]["port"], tmp_path / "out"
    driver = start_driver(spec, ray_cluster)
    try:
        wait_until(lambda: all(s["frames_out"] for s in sources(port).values()) and len(sources(port)) == 2, 240,
                   "the console with both cameras writing")  # fmt: skip
        record = fleet_record(out)
        for name, s in sources(port).items():
            assert (s["worker"], s["node"]) == (record["sources"][name]["worker"], record["sources"][name]["node_id"])
            assert s["state"] == "live" and s["fps_in"] >= 0
        wait_until(lambda: len(json.loads(call(port, "/api/v1/events")[2])) == 2, 30, "c1's events at the driver")
        events = json.loads(call(port, "/api/v1/events")[2])
        assert [(e["seq"], e["kind"], e["source"], e["zone"]) for e in events] == [
            (1, "enter", "c1", "bay"),
            (2, "enter", "c1", "bay"),
        ]
        (snapshot,) = (out / "c1").glob(f"*/{events[0]['snapshot']}")  # in the camera's segment folder
        assert call(port, events[0]["snapshot_url"])[2] == snapshot.read_bytes()
        listed = sources(port)
        assert listed["c1"]["event_counts"]["zones"] == {"bay": 2} and listed["c2"]["event_counts"] is None
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{data['runtime']['metrics']['port']}/metrics").read()
        assert b'sapiens2_zone_people{source="c1",zone="bay"} 2.0' in metrics
        status, _, body = call(port, "/api/v1/sources", "POST", {"name": "c3", "uri": data["sources"][0]["uri"]})
        assert status == 201, body
        placed = fleet_record(out)["sources"]["c3"]["worker"]
        assert placed in record["workers"] and json.loads(body)["worker"] == placed
        wait_until(lambda: records(out / "c3"), 60, "the added camera's results")
        assert call(port, "/api/v1/sources", "POST", {"name": "c3", "uri": "x"})[0] == 409
        with connect(f"ws://127.0.0.1:{port}/api/v1/sources/c3/live.mp4") as ws:
            info = json.loads(ws.recv(timeout=60))
            stream = [ws.recv(timeout=60) for _ in range(6)]
        video = tmp_path / "relayed.mp4"
        video.write_bytes(b"".join(stream))
        assert info["codec"].startswith("avc1.") and stream[0][4:8] == b"ftyp" and played_frames(video) >= 4
        status, _, _ = call(port, "/api/v1/sources/c3", "DELETE")
        assert status == 204 and "c3" not in fleet_record(out)["sources"] and "c3" not in sources(port)
        segment = next(p for p in (out / "c3").iterdir() if p.is_dir())
        assert played_frames(segment / "annotated.mp4") == (segment / "results.jsonl").read_text().count("\n") > 0
    finally:
        driver.send_signal(signal.SIGINT)
        _, stderr = driver.communicate(timeout=120)
    assert driver.returncode == 130, stderr


JOIN_NODE = """
import os, signal, sys, time
from types import SimpleNamespace
from ray.cluster_utils import Cluster

cluster = Cluster()
cluster.head_node = SimpleNamespace(gcs_address=sys.argv[1])  # join the head started by the test
node = cluster.add_node(num_cpus=1, num_gpus=1, node_ip_address="127.0.0.1", wait=False)
signal.signal(signal.SIGTERM, lambda *_: (cluster.remove_node(node, allow_graceful=False), os._exit(0)))
while True:
    time.sleep(1)
"""


def test_an_output_folder_one_node_cannot_see_is_refused_in_one_line(tmp_path, tiny_dir, cluster):
    """A node without the shared storage: started in its own mount namespace with an empty file system mounted over
    the output folder's parent (as a machine that does not mount the NFS share). The driver refuses to run, in one
    line naming the folder, and leaves no worker behind. Last in this module: the node joins the shared cluster."""
    ray_cluster, _ = cluster
    shared = tmp_path / "shared"
    shared.mkdir()
    joiner = tmp_path / "join.py"  # a node of the shared cluster, as Cluster.add_node starts one, in this process
    joiner.write_text(JOIN_NODE)
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    start = f"mount -t tmpfs tmpfs {shared} && exec {sys.executable} {joiner} {ray_cluster.address}"
    node = subprocess.Popen(["unshare", "--mount", "sh", "-c", start], env=env, stdout=subprocess.DEVNULL)
    try:
        living = lambda: sum(n["Alive"] for n in ray_cluster.global_state.node_table())  # noqa: E731
        wait_until(lambda: living() > 1 + len(ray_cluster.worker_nodes), 60, "the blind node")
        spec = fleet_spec(tmp_path, tiny_dir, ["c1", "c2"], None)
        data = yaml.safe_load(spec.read_text())
        data["outputs"]["dir"] = str(shared / "out")
        spec.write_text(yaml.safe_dump(data))
        driver = start_driver(spec, ray_cluster)
        _, stderr = driver.communicate(timeout=240)
        assert driver.returncode == 2, stderr[-3000:]
        (line,) = [line for line in stderr.splitlines() if line.startswith("sapiens2-stream: error")]
        assert f"outputs.dir {shared / 'out'} is not visible from worker" in line and "Traceback" not in stderr
        assert not (shared / "out" / "c1").exists()  # nothing started
    finally:
        processes = descendants(node.pid)
        node.send_signal(signal.SIGTERM)
        node.wait(timeout=60)
        wait_until(lambda: not any(alive(p) for p in processes), 30, "the blind node's processes to end")


BROKEN_DRIVER = '''
import sys

from sapiens2_stream.cli import main
from sapiens2_stream.runtime.stages import base
from sapiens2_stream.runtime.stages.base import GroupStage, register_stage


class Broken(GroupStage):
    """A group stage after triangulate that raises on the group's third moment (defined here, in __main__, so
    that Ray ships it by value to the fleet's hub with the run's group stages)."""

    doc = "raises on the third moment"

    def open(self, options, ctx, emit):
        return {"moments": 0}

    def __call__(self, state, moment):
        state["moments"] += 1
        if state["moments"] == 3:
            raise RuntimeError("broken on purpose")


at = base.ORDER.index("triangulate") + 1
base.ORDER = (*base.ORDER[:at], "broken", *base.ORDER[at:])
register_stage("broken")(Broken)
sys.exit(main(["run", sys.argv[1], "--ray", sys.argv[2], "--no-progress"]))
'''


def test_a_group_stage_that_raises_in_a_fleet_is_said_once_counted_and_off(tmp_path, tiny_dir, cluster):
    """The fleet's hub runs the group stages on the same runner as one machine: a group stage that raises there is
    said once by the driver, counted (the summary's `errors`, the status the driver's /metrics gives), switched
    off, and the moments still reach write_3d."""
    ray_cluster, _ = cluster
    port = free_port()
    out = tmp_path / "out"
    spec, data, _ = calibrated_fleet_spec(tmp_path, tiny_dir, 2, port)
    spec.write_text(yaml.safe_dump(data))
    script = tmp_path / "driver.py"
    script.write_text(BROKEN_DRIVER)
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "PYTHONPATH": str(Path(__file__).parent.parent)}
    driver = subprocess.Popen([sys.executable, str(script), str(spec), ray_cluster.address], stderr=subprocess.PIPE,
                              text=True, env=env)  # fmt: skip
    try:
        wait_until(lambda: len(moment_views(out, 0)) >= 6, 240, "six moments written after the stage failed")

        def metrics() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return r.read().decode()

        wait_until(lambda: 'sapiens2_group_stage_errors_total{stage="broken"} 1.0' in metrics(), 30,
                   "the failed group stage on /metrics")  # fmt: skip
    finally:
        driver.send_signal(signal.SIGINT)
        _, stderr = driver.communicate(timeout=120)
    assert driver.returncode == 3, stderr  # a stage failed, the rest ran: as a run on one machine exits
    said = [line for line in stderr.splitlines() if "group stage broken failed" in line]
    assert len(said) == 1 and said[0].startswith("fleet: group stage broken failed after 3 moments"), stderr
    assert "broken on purpose" in said[0]
    summary = json.loads((out / "summary.json").read_text())
    assert [e["stage"] for e in summary["errors"]] == ["broken"] and summary["errors"][0]["moment"] == 3
    assert summary["live_mocap"]["moments"] >= 6  # every other output went on
