"""`finetune`: train a Sapiens2 task model (pose, seg, matting, normal, pointmap) on labelled data, one GPU or
the CPU.

Upstream's recipe where it applies: AdamW with layer-wise learning-rate decay (the head learns fastest, the patch
embedding slowest), a linear warm-up then linear decay, UDP heatmap targets, flip / scale / rotation / colour
jitter, bf16 autocast and gradient checkpointing on CUDA. The heatmap loss is averaged over the keypoints the
data labels, not all 308: with a few labelled channels among hundreds the mean over all hardly moves.

Checkpoints are written in the released layout (one safetensors file and config.json, whose `image_size` is the
input size trained at, which a pipeline then crops at): `best/` (by the validation score) and `last/`, each
written beside and renamed into place, so a run cut short (Ctrl-C, a crash) leaves the previous one whole.
`resume/` holds the optimizer's state for `--resume`.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from ..errors import Sapiens2StreamError
from ..models.config import ModelConfig, head_preset
from ..models.loading import load_model, read_safetensors
from ..models.network import Sapiens2Network
from ..models.shapes import scale_grid
from ..models.tasks import SIZES, task_spec
from ..models.tiny import TINY_BACKBONE, random_model, save_released, tiny_config
from .batches import StepBatches, batches, default_workers, start_worker_server
from .ctrl_c import CtrlC, ctrl_c
from .data import DenseSet, PoseSet, read_dense_set, read_pose_set
from .evaluate import primary, scores
from .losses import loss_of
from .threads import CoreShare
from .trainable import trainable_tasks


@dataclass
class FinetuneOptions:
    task: str
    data: str
    output: str
    source: str = "tiny"  # a hub id, folder or file (as models.<task>.source), or "tiny": a fresh tiny model; a
    # model of another task (or the pretrained backbone) gives its backbone, under a fresh head
    val: str | None = None  # held-out data in the same format (default: a tenth of `data`)
    images: str | None = None  # pose: the images' folder, if not beside the JSON
    keypoints: str | None = None  # pose: {"their name": "one of the 308"}
    classes: str | None = None  # seg: {"their id": one of 0-28 (255: ignore)}
    steps: int = 2000
    batch_size: int = 16
    lr: float | None = None  # default: 1e-3 from "tiny", 5e-4 for a fresh head, 1e-4 from a model of the task
    input_size: tuple[int, int] | None = None  # default: the model's own
    freeze: str = "none"  # or "backbone": train the head only
    device: str = "auto"
    resume: bool = False
    val_every: int | None = None  # default: a tenth of the steps
    layer_decay: float = 0.9
    weight_decay: float = 0.1
    warmup: int | None = None  # default: 500 steps, at most a tenth of them
    seed: int = 0
    head_width: int = 1  # a fresh tiny head's channels times this (the toy seg model's head is 4x wide)
    workers: int | None = None  # processes making batches ahead (0: on the training thread; default: from the cores)
    progress: bool = True


def read_sets(opts: FinetuneOptions) -> tuple[PoseSet | DenseSet, PoseSet | DenseSet]:
    """(train, validation), every problem with the data reported before anything is trained or written."""
    if task_spec(opts.task).truth == "keypoints":
        train = read_pose_set(pose_file(opts.data), opts.images, opts.keypoints)
        val = read_pose_set(pose_file(opts.val), opts.images, opts.keypoints) if opts.val else None
    else:
        train = read_dense_set(opts.data, opts.task, opts.classes)
        val = read_dense_set(opts.val, opts.task, opts.classes) if opts.val else None
    if val is None:
        train, val = split(train, opts.seed)
    return train, val


def split_folders(data: str, val: str | None) -> tuple[str, str | None]:
    """A folder already split (train/ and val/ inside, as `label` writes) gives both sides; --val still wins."""
    root = Path(data)
    if (root / "train").is_dir() and (root / "val").is_dir():
        return str(root / "train"), val or str(root / "val")
    return data, val


def pose_file(data: str) -> str:
    """Pose data: the COCO JSON itself, or a folder's keypoints.json."""
    return str(Path(data) / "keypoints.json") if Path(data).is_dir() else data


def split(data: PoseSet | DenseSet, seed: int) -> tuple:
    """A tenth of the pictures (at least one) held out."""
    n = len(data.images)
    if n < 2:
        raise Sapiens2StreamError("one picture only: nothing to hold out for validation; pass --val")
    held = set(np.random.default_rng(seed).permutation(n)[: max(1, n // 10)].tolist())
    if isinstance(data, DenseSet):
        pick = [[i for i in range(n) if (i in held) == v] for v in (False, True)]
        return tuple(
            DenseSet([data.images[i] for i in p], [data.targets[i] for i in p], [data.files[i] for i in p])
            for p in pick
        )
    out = []
    for v in (False, True):
        people = np.array([i for i in range(len(data)) if (data.image_of[i] in held) == v])
        images = sorted(set(data.image_of[people].tolist()))
        remap = {old: new for new, old in enumerate(images)}
        out.append(
            PoseSet(
                [data.images[i] for i in images],
                np.array([remap[i] for i in data.image_of[people]]),
                data.boxes[people],
                data.keypoints[people],
                data.labelled,
            )
        )
    return tuple(out)


def build(opts: FinetuneOptions, device: torch.device) -> tuple[Sapiens2Network, tuple[int, int], bool]:
    """The model to train, the input size it is trained at, and whether its head is new (then it learns faster)."""
    if opts.resume:
        last = Path(opts.output) / "last"
        if not last.exists():
            raise Sapiens2StreamError(f"--resume: {last} does not exist; run without --resume first")
        model = load_model(last, task=opts.task)
    else:
        model = random_model(tiny_config(opts.task), opts.seed) if opts.source == "tiny" else load_model(opts.source)
    size = tuple(opts.input_size) if opts.input_size else tuple(model.config.image_size)
    if any(v % model.config.backbone.patch_size for v in size):
        raise Sapiens2StreamError(f"--input-size {size[0]}x{size[1]}: both must be multiples of 16")
    fresh = not opts.resume and (opts.source == "tiny" or model.task != opts.task or opts.head_width != 1)
    if fresh:
        model = with_new_head(model, opts.task, opts.seed, size, opts.head_width)
    elif model.spec.scale_branch and size != tuple(model.config.image_size):
        raise Sapiens2StreamError(
            f"--input-size: a pointmap model's focal-scale branch is tied to the size it was trained at "
            f"({model.config.image_size[0]}x{model.config.image_size[1]})"
        )
    spec = task_spec(opts.task)
    need = spec.channels if spec.truth in ("keypoints", "classes") else None  # the released layouts
    if need and model.config.head.num_outputs != need:
        raise Sapiens2StreamError(
            f"{opts.source}: its head has {model.config.head.num_outputs} outputs; finetune "
            f"{opts.task} trains the {need} of the released layout"
        )
    model.config = replace(model.config, image_size=size)
    return model.to(device).train(), size, fresh


def with_new_head(
    model: Sapiens2Network, task: str, seed: int, size: tuple[int, int], width: int = 1
) -> Sapiens2Network:
    """A `task` model on another model's backbone (a pretrained backbone, another task's, a fresh tiny one) with
    a fresh head: the tiny one (its channels times `width`) on the tiny backbone, else the released head of the
    backbone's size. A focal-scale branch is shaped for the input size `size`."""
    backbone = model.config.backbone
    if backbone == TINY_BACKBONE:
        head = tiny_config(task).head
        head = replace(
            head,
            upsample_channels=tuple(c * width for c in head.upsample_channels),
            conv_channels=tuple(c * width for c in head.conv_channels),
        )
    else:
        sizes = [
            n
            for n, s in SIZES.items()
            if (s["hidden_size"], s["num_layers"]) == (backbone.hidden_size, backbone.num_layers)
        ]
        if not sizes:
            raise Sapiens2StreamError(f"a {model.task} model of no released size: no {task} head to put on it")
        head = head_preset(task, sizes[0])
    if head.scale_conv_channels:  # as many stride-2 convolutions as leave the small inputs a grid to normalise
        n = len(head.scale_conv_kernels)
        while n > 1 and min(scale_grid(size, backbone.patch_size, head.scale_conv_kernels[:n])) < 3:
            n -= 1
        kernels = head.scale_conv_kernels[:n]
        head = replace(head, scale_conv_channels=head.scale_conv_channels[:n], scale_conv_kernels=kernels,
                       scale_grid=scale_grid(size, backbone.patch_size, kernels))  # fmt: skip
    fresh = random_model(ModelConfig(task, backbone, head, image_size=size), seed)
    fresh.backbone.load_state_dict(model.backbone.state_dict())
    return fresh


def silence_unlabelled(model, labelled: np.ndarray) -> None:
    """A fresh pose model's keypoints that the data never labels give all-zero heatmaps (score 0) rather than
    noise: their predictor rows start at zero, and as they weigh nothing in the loss they get no gradient."""
    predictor = model.decode_head.predictor
    with torch.no_grad():
        predictor.weight[~torch.from_numpy(labelled)] = 0
        predictor.bias[~torch.from_numpy(labelled)] = 0


def layer_groups(model, base_lr: float, decay: float, weight_decay: float, freeze: str) -> list[dict]:
    """AdamW groups: the learning rate decays by `decay` per layer from the head down to the patch embedding;
    norms, biases and tokens get no weight decay."""
    layers = model.config.backbone.num_layers
    groups: dict[tuple, dict] = {}
    for name, p in model.named_parameters():
        if freeze == "backbone" and name.startswith("backbone."):
            p.requires_grad_(False)
            continue
        if name.startswith("backbone.blocks."):
            depth = int(name.split(".")[2]) + 1
        elif name.startswith("backbone.ln1"):
            depth = layers
        elif name.startswith("backbone."):
            depth = 0
        else:
            depth = layers + 1
        no_decay = p.ndim == 1 or name.endswith(("cls_token", "storage_tokens"))
        key = (depth, no_decay)
        if key not in groups:
            groups[key] = {
                "params": [],
                "lr": base_lr * decay ** (layers + 1 - depth),
                "weight_decay": 0.0 if no_decay else weight_decay,
            }
        groups[key]["params"].append(p)
    for g in groups.values():
        g["initial_lr"] = g["lr"]
    return list(groups.values())


def schedule(step: int, steps: int, warmup: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (steps - step) / max(steps - warmup, 1))


def save_folder(model, folder: Path, task: str) -> None:
    """Write the checkpoint beside `folder` and rename it into place: `folder` is always a whole checkpoint."""
    tmp = folder.with_name(folder.name + ".writing")
    shutil.rmtree(tmp, ignore_errors=True)
    save_released(model, tmp, f"sapiens2_{task}")
    old = folder.with_name(folder.name + ".old")
    if folder.exists():
        folder.rename(old)
    tmp.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


def save_resume(out: Path, optimizer: torch.optim.Optimizer, state: dict) -> None:
    from safetensors.torch import save_file

    tensors, scalars = {}, {}
    for i, s in optimizer.state_dict()["state"].items():
        for k, v in s.items():
            if torch.is_tensor(v) and v.ndim > 0:
                tensors[f"{i}.{k}"] = v.detach().cpu().contiguous()
            else:
                scalars[f"{i}.{k}"] = float(v)
    tmp = out / "resume.writing"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(tensors, str(tmp / "optimizer.safetensors"))
    (tmp / "state.json").write_text(json.dumps({**state, "scalars": scalars}))
    old = out / "resume.old"
    if (out / "resume").exists():
        (out / "resume").rename(old)
    tmp.rename(out / "resume")
    shutil.rmtree(old, ignore_errors=True)


def load_resume(out: Path, optimizer: torch.optim.Optimizer) -> dict:
    folder = out / "resume"
    if not (folder / "state.json").exists():
        raise Sapiens2StreamError(f"--resume: {folder} holds no optimizer state; run without --resume")
    state = json.loads((folder / "state.json").read_text())
    tensors = read_safetensors(folder / "optimizer.safetensors")
    sd = optimizer.state_dict()
    for key, v in tensors.items():
        i, name = key.split(".", 1)
        sd["state"].setdefault(int(i), {})[name] = v
    for key, v in state.pop("scalars").items():
        i, name = key.split(".", 1)
        sd["state"].setdefault(int(i), {})[name] = torch.tensor(v)
    optimizer.load_state_dict(sd)
    return state


def next_batch(feed: Iterator[tuple[torch.Tensor, ...]], interrupt: CtrlC) -> tuple[torch.Tensor, ...]:
    """The next batch; a worker lost to the same Ctrl-C (one that came before it could ignore it) is that Ctrl-C."""
    try:
        return next(feed)
    except RuntimeError:
        if interrupt.pressed:
            raise KeyboardInterrupt from None
        raise


def finetune(opts: FinetuneOptions) -> dict:
    """Train; returns the last validation scores. Raises Sapiens2StreamError for bad data before training, and
    KeyboardInterrupt after saving `last/` when interrupted (Ctrl-C: `ctrl_c.py`)."""
    from tqdm import tqdm

    from ..runtime.device import resolve_device

    if opts.task not in trainable_tasks():
        raise Sapiens2StreamError(f"finetune trains {', '.join(trainable_tasks())}; not {opts.task!r}")
    if opts.freeze not in ("none", "backbone"):
        raise Sapiens2StreamError(f"--freeze must be none or backbone, not {opts.freeze!r}")
    data, val = split_folders(opts.data, opts.val)
    opts = replace(opts, data=data, val=val)  # training.json names the sides read
    device = resolve_device(opts.device)
    workers = default_workers() if opts.workers is None else opts.workers
    if workers:
        start_worker_server()
    train, val = read_sets(opts)
    torch.manual_seed(opts.seed)
    model, size, fresh = build(opts, device)
    keypoints = task_spec(opts.task).truth == "keypoints"
    if keypoints and opts.source == "tiny" and not opts.resume:
        silence_unlabelled(model, train.labelled)
    out = Path(opts.output)
    cuda = device.type == "cuda"
    model.backbone.checkpointing = cuda
    lr = opts.lr or (1e-3 if opts.source == "tiny" else 5e-4 if fresh else 1e-4)
    optimizer = torch.optim.AdamW(
        layer_groups(model, lr, opts.layer_decay, opts.weight_decay, opts.freeze), betas=(0.9, 0.999)
    )
    warmup = opts.warmup if opts.warmup is not None else min(500, opts.steps // 10)
    val_every = opts.val_every or max(1, opts.steps // 10)
    out.mkdir(parents=True, exist_ok=True)
    state = {"step": 0, "best": None}
    if opts.resume:
        state = load_resume(out, optimizer)
    key, sign = primary(opts.task)
    sigma = max(1.5, 6.0 * (size[1] // 4) / 192)
    (out / "training.json").write_text(
        json.dumps(
            {**asdict(opts), "input_size": list(size), "lr": lr, "warmup": warmup, "sigma": sigma, "workers": workers},
            indent=1,
        )
    )
    maker = StepBatches(train, opts.task, size, opts.batch_size, opts.seed, sigma)
    metrics_file = (out / "metrics.jsonl").open("a")
    started, seen, losses, waits, step_times = time.perf_counter(), 0, [], [], []

    def validate() -> dict:
        """Score on the held-out data, log a line (the mean training loss since the last one), keep best/."""
        result = scores(model, val, opts.task, size)
        line = {
            "step": state["step"],
            **({"loss": round(float(np.mean(losses)), 6)} if losses else {}),
            **{k: round(v, 5) for k, v in result.items()},
            "seconds": round(time.perf_counter() - started, 1),
            **({"step_ms": round(1000 * float(np.mean(step_times)), 1)} if step_times else {}),
            **({"data_wait_ms": round(1000 * float(np.mean(waits)), 1)} if waits else {}),
            "threads": torch.get_num_threads(),
        }
        metrics_file.write(json.dumps(line) + "\n")
        metrics_file.flush()
        bar.write(" ".join(f"{k} {v}" for k, v in line.items()))
        for since_last in (losses, waits, step_times):
            since_last.clear()
        return result

    bar = tqdm(
        total=opts.steps,
        initial=state["step"],
        desc=f"finetune {opts.task}",
        unit="step",
        disable=not opts.progress,
        dynamic_ncols=True,
    )
    feed = batches(maker, state["step"], opts.steps, workers, device)
    share = CoreShare() if device.type == "cpu" else None
    with ctrl_c() as interrupt:
        try:
            last_scores = validate() if state["step"] == 0 else {}  # where it starts from
            while state["step"] < opts.steps:
                step = state["step"]
                for g in optimizer.param_groups:
                    g["lr"] = g["initial_lr"] * schedule(step, opts.steps, warmup)
                if share and step % 10 == 0:
                    share.adjust()
                began = time.perf_counter()
                batch = next_batch(feed, interrupt)
                waits.append(time.perf_counter() - began)
                with interrupt.hold():  # a step is never torn: the model saved below is one the optimizer made
                    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
                        loss = loss_of(model, opts.task, batch)
                    if not math.isfinite(loss.item()):
                        raise Sapiens2StreamError(f"step {step}: the loss is {loss.item()}; lower --lr")
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
                    optimizer.step()
                    state["step"] = step + 1
                seen += opts.batch_size
                losses.append(loss.item())
                step_times.append(time.perf_counter() - began)
                bar.update(1)
                bar.set_postfix(loss=f"{loss.item():.4f}", img_s=f"{seen / (time.perf_counter() - started):.0f}")
                if state["step"] % val_every == 0 or state["step"] == opts.steps:
                    last_scores = validate()
                    value = sign * last_scores[key]
                    if state["best"] is None or value > state["best"]:
                        state["best"] = value
                        save_folder(model, out / "best", opts.task)
                    save_folder(model, out / "last", opts.task)
                    save_resume(out, optimizer, state)
        except KeyboardInterrupt:
            bar.write(f"interrupted at step {state['step']}: saving last/")
            save_folder(model, out / "last", opts.task)
            save_resume(out, optimizer, state)
            raise
        finally:
            feed.close()  # the workers stop
            bar.close()
            metrics_file.close()
    return last_scores
