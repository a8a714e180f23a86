"""What `batch` and the live fleet share on Ray: connecting (or starting a local instance) and how many workers
to run with which resources: one per GPU (Ray gives each its own CUDA_VISIBLE_DEVICES), on CPU-only clusters one
per `cpus_per_worker` CPUs."""

from __future__ import annotations

import os

from ..errors import Sapiens2StreamError


def connect(address: str, detect_s: float | None = None):
    """`local` starts a Ray instance on this machine (with health checks that notice a lost node within about
    `detect_s`), `auto` joins the cluster this machine is part of, anything else is a cluster address
    (ray://HEAD:10001 or HOST:PORT). Returns the ray module."""
    try:
        import ray
    except ImportError:
        raise Sapiens2StreamError("--ray needs Ray: pip install 'sapiens2-stream[ray]'") from None
    if ray.is_initialized():
        return ray
    # a named namespace: the fleet's workers are detached actors, which Ray keeps out of anonymous namespaces
    options: dict = {"include_dashboard": False, "log_to_driver": False, "namespace": "sapiens2-stream"}
    if address == "local":
        # Ray starts its workers at niceness 15, so on a machine doing anything else the models starve; here the
        # workers are the machine's main work
        options["_system_config"] = {"worker_niceness": 0}
        if detect_s is not None:
            period_ms = max(200, int(detect_s * 1000 / 4))
            options["_system_config"] |= {"health_check_period_ms": period_ms, "health_check_timeout_ms": period_ms,
                                          "health_check_failure_threshold": 3}  # fmt: skip
        if os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") == "0":
            options["_node_ip_address"] = "127.0.0.1"
    try:
        ray.init(address=address, **options)  # "local" starts a new instance even where a cluster already runs
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise Sapiens2StreamError(f"--ray {address}: cannot connect ({str(e).splitlines()[0]})") from None
    return ray


def worker_plan(ray, workers: int | str | None, cpus_per_worker: int = 4) -> tuple[int, dict]:
    """How many workers and the resources of each: `workers` (a number) or one per GPU, else one per
    `cpus_per_worker` CPUs (at least one)."""
    resources = ray.cluster_resources()
    gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 1))
    count = workers if isinstance(workers, int) else gpus or max(1, cpus // cpus_per_worker)
    options = {"num_gpus": 1} if gpus else {"num_cpus": max(1, min(cpus_per_worker, cpus // count))}
    return count, options
