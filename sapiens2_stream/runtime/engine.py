"""Batched Sapiens2 inference for a micro-batch of frames: crops across frames and people, flip TTA in the
same forward, decoding on device, dense outputs mapped back to each frame."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from ..deploy.artifact import check_artifact
from ..deploy.exported import ExportedModel
from ..deploy.parity import fp8_gate
from ..errors import Sapiens2StreamError
from ..io.sources import Frame
from ..models import load_model, pipeline_tasks
from ..models.fp8 import fp8_refusal
from ..models.loading import locate_checkpoint
from ..models.network import Sapiens2Network
from ..processing import crop_persons, merge_flip, prepare_frames, with_flipped
from .device import BUCKETS, bucket_size, compile_model, pad_to_bucket, prepare_device_thread, transfers_for
from .options import ModelSection
from .results import FrameResult, Person

log = logging.getLogger("sapiens2_stream")


def as_host_type(value: torch.Tensor) -> torch.Tensor:
    """Results leave the device as float32 (numpy has no bfloat16; a half-precision run's maps stay exact enough)
    or as the integer type they are."""
    return value.float() if value.is_floating_point() else value


def chunks(n: int, size: int) -> list[slice]:
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


Outputs = list[dict[str, torch.Tensor]]  # what one task leaves on the device for one batch


def check_model_sources(models: dict[str, ModelSection]) -> None:
    """What loading the models would refuse, found without reading a tensor or asking the hub: a source that is no
    file, folder or hub id, a folder without safetensors, a pickle, an export without its passing report."""
    for task, model in models.items():
        if model.runtime != "torch":
            check_artifact(model.source, task, model.runtime, model.input_size)
        else:
            locate_checkpoint(model.source, download=False)


def with_fp8(model: Sapiens2Network, size: tuple[int, int], device: torch.device) -> tuple[Sapiens2Network, str]:
    """`model` with its backbone's products in fp8 where the device has fp8 and the parity gate passes it against
    its own bf16 outputs, else `model`; and what was done, for the summary (said in a line when it was not)."""
    why = fp8_refusal(device)
    if why is None:
        gate = fp8_gate(model, size, device)
        if gate["passed"]:
            shown = ", ".join(f"{k} {v:.3g}" for k, v in gate["measured"].items())
            return gate["model"], f"on (parity against bf16: {shown})"
        why = f"the parity gate failed ({'; '.join(gate['failures'])})"
    log.warning("runtime.fp8: %s model stays in %s: %s", model.task, str(next(model.parameters()).dtype)[6:], why)
    return model, f"off: {why}"


class InferenceEngine:
    """Holds the loaded models and runs them on micro-batches; everything stays on the device until the end.

    All device work happens on `executor`, one thread for the life of the engine: CUDA graph trees
    (`torch.compile(mode="reduce-overhead")`) and CUDA streams keep per-thread state, so calls hopping between
    threads would record the graphs again and multiply their memory. A batch is uploaded once, every task's
    forward is launched on its own stream before any result is copied back, and the batch synchronises once.
    """

    def __init__(
        self, models: dict[str, ModelSection], device: torch.device, dtype: torch.dtype, compiled: bool = False,
        seg_width: int | None = None, fp8: bool = False,
    ) -> None:  # fmt: skip
        """`compiled`: run torch.compile'd models on batches padded to a few bucket sizes (static shapes);
        `seg_width`: also give the seg model's class probabilities at this width (for the temporal filter);
        `fp8`: the models' backbones in fp8 where the device has it and the parity gate passes (`fp8` says, per
        task)."""
        self.cfg = models
        self.fp8: dict[str, str] = {}  # task -> "on ..." or "off: why" (runtime.fp8 asked)
        self.compiled = compiled
        self.seg_width = seg_width
        self.device, self.dtype = device, dtype
        self.models = {}
        self.sizes: dict[str, tuple[int, int]] = {}  # each model's input (height, width): the YAML's, or its own
        # each running task's entry of the task table, looked up once (not in every batch)
        self.specs = {spec.name: spec for spec in pipeline_tasks() if spec.name in models}
        for task in self.specs:  # the table's order: the order a batch launches them in
            section = models[task]
            if section.runtime != "torch":  # a folder export-model wrote, run by its own runtime
                exported = ExportedModel(section.source, task, section.runtime, section.input_size, device)
                if exported.flip_in_graph and section.flip == "off":
                    raise Sapiens2StreamError(
                        f"models.{task}: {section.source} has flip TTA inside its graph "
                        "(export-model --flip fused); for flip: off export with --flip none"
                    )
                self.models[task], self.sizes[task] = exported, exported.input_size
                continue
            model = load_model(section.source, device=device, dtype=dtype)
            if model.task != task:
                raise Sapiens2StreamError(f"models.{task}.source {section.source!r} holds a {model.task} model, not "
                                          f"{task}")  # fmt: skip
            self.sizes[task] = tuple(section.input_size or model.config.image_size)
            if fp8:
                model, self.fp8[task] = with_fp8(model, self.sizes[task], device)
            self.models[task] = model
        self.runners = {t: compile_model(m, device) if compiled and isinstance(m, Sapiens2Network) else m
                        for t, m in self.models.items()}  # fmt: skip
        self.flip_in_graph = {t for t, m in self.models.items() if isinstance(m, ExportedModel) and m.flip_in_graph}
        # Flip TTA mirrors back the predictor's inputs instead of its outputs when those are fewer (pose: 308
        # heatmaps from 256 features), for the tasks the table allows it.
        self.fused_flip = set()
        for task, model in self.models.items():
            if not isinstance(model, Sapiens2Network):
                continue
            predictor = model.decode_head.predictor
            if self.specs[task].fuse_flip and not compiled and predictor.in_channels < predictor.out_channels:
                self.fused_flip.add(task)
        self.transfers = transfers_for(device, list(self.models))
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sapiens2-device",
                                           initializer=prepare_device_thread, initargs=(device, compiled))  # fmt: skip
        self.events: list[str] = []

    def input_dtype(self, task: str) -> torch.dtype:
        """An export takes float32 pixels whatever its precision (it casts inside); a PyTorch model its own."""
        return self.dtype if isinstance(self.models[task], Sapiens2Network) else torch.float32

    def flip_for(self, task: str, under_load: bool) -> bool:
        if task in self.flip_in_graph:  # its graph always flips
            return True
        mode = self.cfg[task].flip
        return mode == "on" or (mode == "auto" and not under_load)

    @torch.inference_mode()
    def run(self, frames: list[Frame], people: list[list[Person]], under_load: bool = False) -> list[FrameResult]:
        """Results for a micro-batch of frames (from any sources) and the people found in each."""
        results = [FrameResult(f, p) for f, p in zip(frames, people, strict=True)]
        flips = {task: self.flip_for(task, under_load) for task in self.models}
        images = self.transfers.upload([f.rgb for f in frames])
        launched: dict[str, Outputs] = {}
        for task in self.models:
            with self.transfers.stream(task):
                launched[task] = self._launch(task, images, results, flips[task])
        copies: dict[str, Outputs] = {}
        for task, outputs in launched.items():
            with self.transfers.stream(task):
                copies[task] = [{k: self.transfers.to_host(v) for k, v in out.items()} for out in outputs]
        self.transfers.synchronize()
        for task, outputs in copies.items():
            self._assemble(task, results, outputs)
            for r in results:
                r.flip[task] = flips[task]
        return results

    def warm_up(self, max_frames: int) -> dict[str, list[int]]:
        """Compile every batch shape a run can meet, before its first frame; returns the forward batch sizes
        compiled, per task. A graph is built per shape on first use, seconds per shape on a GPU: met mid-stream (a
        live source's smaller batch, flip TTA switched off under load) that is a stall in which a camera's frames
        are dropped. `max_frames`: frames per micro-batch (`runtime.max_frames_per_batch`)."""
        if not self.compiled:
            return {}
        return self.executor.submit(self._warm_up, max_frames).result()

    @torch.inference_mode()
    def _warm_up(self, max_frames: int) -> dict[str, list[int]]:
        compiled: dict[str, list[int]] = {}
        for task, model in self.models.items():
            if not isinstance(model, Sapiens2Network):
                continue
            cfg = self.cfg[task]
            most = cfg.max_batch if self.specs[task].per_person else min(cfg.max_batch, max_frames)
            flips = {"on": (True,), "off": (False,)}.get(cfg.flip, (False, True))
            shapes = set()
            for n in [b for b in BUCKETS if b < bucket_size(most)] + [bucket_size(most)]:  # every padded size
                x = torch.zeros(n, 3, *self.sizes[task], device=self.device, dtype=self.input_dtype(task))
                for flip in flips:
                    with self.transfers.stream(task):
                        for _ in range(2):  # CUDA graph trees record on the second call of a shape
                            self._forward(task, x, flip)
                    shapes.add(2 * n if flip else n)
            self.transfers.synchronize()
            compiled[task] = sorted(shapes)
        return compiled

    def _forward(self, task: str, x: torch.Tensor, flip: bool) -> dict[str, torch.Tensor | None]:
        """The task's outputs for batch x, flip TTA merged in. A batch that runs out of device memory is split
        in two and retried (recursively), and the split is reported in `events`."""
        n = x.shape[0]
        spec = self.specs[task]
        batch = pad_to_bucket(x) if self.compiled else x
        try:
            if flip and task in self.fused_flip:
                (name,) = spec.flips
                return {name: self.models[task].flip_tta(batch, spec.flip_order(name))[:n]}
            in_graph = task in self.flip_in_graph
            out = self.runners[task](with_flipped(batch) if flip and not in_graph else batch)
        except torch.OutOfMemoryError:
            if x.shape[0] == 1:
                raise Sapiens2StreamError(
                    f"models.{task}: out of memory on a single input; use bf16, a smaller model or input_size"
                ) from None
            if x.is_cuda:
                torch.cuda.empty_cache()
            half = x.shape[0] // 2
            self.events.append(f"{task}: out of memory on a batch of {x.shape[0]}; split it in two and continued")
            first, second = self._forward(task, x[:half], flip), self._forward(task, x[half:], flip)
            return {k: None if v is None else torch.cat([v, second[k]]) for k, v in first.items()}
        merged: dict[str, torch.Tensor | None] = {}
        for name, how in spec.flips.items():
            value = getattr(out, name)
            if value is not None:
                if flip and not in_graph:
                    value = merge_flip(value, how.kind, spec.flip_order(name))
                value = value[:n]  # drop the bucket padding
                if self.compiled:
                    # a CUDA graph's outputs live in memory its next replay overwrites (the other half of an
                    # out-of-memory split, the next chunk): copied out before anything else runs
                    value = value.clone()
            merged[name] = value
        return merged

    def _launch(self, task: str, images: list[torch.Tensor], results: list[FrameResult], flip: bool) -> Outputs:
        """Queue the task's work for the batch: the forward and the table's post-processing; the outputs stay on
        the device."""
        spec, cfg = self.specs[task], self.cfg[task]
        if spec.per_person:
            return self._launch_crops(task, images, results, flip)
        width = self.seg_width if spec.temporal is not None and spec.temporal.kind == "seg" else None
        outputs: Outputs = []
        for part in chunks(len(images), cfg.max_batch):
            frames = prepare_frames(images[part], self.sizes[task], spec.keep_aspect, device=self.device,
                                    dtype=self.input_dtype(task))  # fmt: skip
            outputs += [
                {name: as_host_type(value) for name, value in item.items()}
                for item in spec.frame_post(self._forward(task, frames.pixel_values, flip), frames, width)
            ]
        return outputs

    def _launch_crops(self, task: str, images: list[torch.Tensor], results: list[FrameResult], flip: bool) -> Outputs:
        """A per-person task: every person's crop, batched across frames; one output of every crop's arrays."""
        spec, cfg = self.specs[task], self.cfg[task]
        boxes = [np.array([p.box for p in r.people], np.float32).reshape(-1, 4) for r in results]
        size = self.sizes[task]
        crops = crop_persons(images, boxes, size, device=self.device, dtype=self.input_dtype(task))
        if len(crops) == 0:
            return []
        parts = [spec.crop_post(self._forward(task, crops.pixel_values[part], flip), crops.boxes[part], size)
                 for part in chunks(len(crops), cfg.max_batch)]  # fmt: skip
        return [{name: as_host_type(torch.cat([p[name] for p in parts])) for name in parts[0]}]

    def _assemble(self, task: str, results: list[FrameResult], outputs: Outputs) -> None:
        """Hand the host copies of the task's outputs to the results they belong to."""
        keep = self.transfers.keep
        if self.specs[task].per_person:
            if outputs:
                people = [p for r in results for p in r.people]
                for name, value in outputs[0].items():
                    for person, array in zip(people, keep(value).numpy(), strict=True):
                        setattr(person, name, array)
            return
        for r, out in zip(results, outputs, strict=True):
            for name, value in out.items():
                setattr(r, name, keep(value).numpy())
