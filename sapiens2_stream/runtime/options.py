"""The runtime's sections: `runtime:` (device, batching, queues; its console and metrics servers), `models:` (one
section per task of the table), `temporal:` (a switch per steadied output) and `fleet:` (`run --ray`). Light on
purpose, as every package's `options` module: reading a pipeline file imports no torch."""

from __future__ import annotations

from dataclasses import field
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field

from ..config import (
    DEFAULT_FPS,
    Above0,
    AtLeast0,
    Count,
    Port,
    Switch,
    on_off,
    section,
)


@section
class MetricsConfig:
    """Prometheus metrics at /metrics and a health check at /healthz."""

    port: Port | None = None  # None: no metrics server
    host: str = "127.0.0.1"  # only this machine, unless you say otherwise


@section
class ServerTls:
    """HTTPS for a server of ours (`runtime.console.tls`): its certificate and private key, PEM files."""

    certfile: str | None = None  # the server's certificate (with its chain); needed
    keyfile: str | None = None  # its private key; needed


@section
class ConsoleConfig:
    """The web console: live views, status, sources added and removed while running (the site's page "The console")."""

    port: Port | None = None  # None: no console (--console PORT)
    host: str = "127.0.0.1"  # only this machine; any other host needs token_env
    token_env: str | None = None  # the environment variable that holds the token every request must bring
    tls: ServerTls | None = None  # serve HTTPS with this certificate (None: plain HTTP)


@section(key="runtime")
class RuntimeConfig:
    device: str = "auto"  # auto, cpu, cuda, cuda:1
    dtype: Literal["auto", "fp32", "bf16", "fp16"] = "auto"  # auto: bf16 on CUDA and on CPUs with native bf16
    max_wait_ms: AtLeast0 = 20.0  # how long the take stage waits for more frames to fill a micro-batch
    max_frames_per_batch: Count = 4  # frames per micro-batch (files; live sources take fewer to stay fresh)
    queue_size: Count = 8  # frames waiting per source for the models
    policy: Literal["auto", "block", "latest", "drop_oldest"] = "auto"  # auto: block for files, latest for live
    max_frame_age_s: Above0 = 1.0  # live, unless policy is block: frames waiting longer are dropped before any
    # work (a frame the models took is always finished and written)
    threads: Count | None = None  # torch CPU threads for the run (the process's setting is given back after it)
    compile: Literal["auto", "on", "off"] = "auto"  # torch.compile with batches padded to buckets, each compiled
    # before the first frame; auto: CUDA only
    fp8: Switch = False  # the backbone's matrix products in fp8 on GPUs that have it (H100, H200), each model only
    # once the parity gate passed it against its own bf16 outputs (the summary says, per task)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    console: ConsoleConfig = field(default_factory=ConsoleConfig)


@section(key="fleet")
class FleetConfig:
    """`run --ray`: the cameras of `sources:` spread over Ray workers (the site's page "Batch jobs and the fleet")."""

    workers: Count | Literal["auto"] = "auto"  # auto: one per GPU of the cluster; without GPUs one per
    # cpus_per_worker
    cpus_per_worker: Count = 4  # CPU-only clusters: CPUs per worker (as `batch` does)
    headroom: Annotated[float, Field(ge=0, lt=1)] = 0.2  # spare share of each worker kept free, so a lost worker's
    # cameras fit elsewhere
    pins: dict[str, str] = field(default_factory=dict)  # camera -> Ray node id (hex): tried first, not required
    detect_s: Above0 = 5.0  # how fast a lost node is noticed (Ray's health checks for --ray local; call timeouts)
    camera_fps: Above0 = DEFAULT_FPS  # a camera's frames/s when neither source.fps nor its stream says
    max_result_age_s: Above0 = 10.0  # /healthz: a camera without a result for longer than this is unhealthy


InputSize = Annotated[list[Annotated[int, Field(ge=16)]], Field(min_length=2, max_length=2)]


@section
class ModelSection:
    """One task's model (`models.<task>`)."""

    source: str = ""  # hub id, folder or .safetensors file
    flip: Annotated[Literal["on", "off", "auto"] | bool, BeforeValidator(on_off)] = "auto"  # flip TTA; auto turns
    # it off when a live source falls behind
    max_batch: Count = 8  # crops (pose) or frames (dense tasks) per forward
    input_size: InputSize | None = None  # model input [height, width], multiples of 16; default: the model's own
    # (its config.json image_size: 1024x768 for the released models, what finetune --input-size trained at)
    runtime: Literal["torch", "onnxruntime", "openvino", "tensorrt"] = "torch"  # what runs the model: PyTorch, or
    # the runtime of a folder `export-model` wrote (source:), which runs only with its passing parity.json


@section
class TemporalParameters:
    """What every output's temporal filter shares."""

    new_weight: Annotated[float, Field(gt=0, le=1)] = 0.4  # the new frame's share where the history is trusted (1: no
    # smoothing)
    tau: Above0 = 0.02  # picture difference (0-1 grey) at which the history's trust falls to 1/e
    margin: AtLeast0 = 0.1  # part labels: the probability lead a new class needs to take a pixel from the old one
    flow_width: Annotated[int, Field(ge=32)] = 320  # the optical flow's picture width (pixels)
    width: Annotated[int, Field(ge=32)] = 640  # matte, normals, depth wider than this are filtered at this width, the
    # change enlarged
    seg_width: Annotated[int, Field(ge=16)] = 256  # part labels are steadied on class probabilities this wide (the
    # cost grows with its square)
