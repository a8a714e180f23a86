"""Training batches made ahead of the step that needs them, by worker processes, from samples cut once.

Two things kept the trainer slower than a plain loop over preloaded crops: every batch was cropped, jittered and
turned into heatmaps on the training thread (on a GPU that work would sit between every two steps), and each crop
was warped out of a whole picture. Here each person's surroundings are cut out of its picture once, at no more
than the resolution the input size needs (`cut_people`), and a `DataLoader` of worker processes builds batch `s`
from a random generator seeded by (seed, s): the batches do not depend on how many workers there are, and
`--resume` at step s sees the batches an unbroken run would have.

The workers are started by a fork server, not forked from the trainer: a process that has run an export's
runtime, a pipeline or a console holds native threads (ONNX Runtime's and OpenVINO's pools, PyAV's, OpenCV's),
and a fork copies their memory and locks in whatever state they were in, with none of the threads that would
release them. The fork server is a fresh single-threaded process that has imported this module and nothing else;
the pictures reach the workers once, as shared memory (`SharedArrays`). And nothing a worker keeps is ever in a
batch it sends: sending a CPU tensor moves its storage into shared memory in place, from the queue's feeder
thread, while the worker may be reading it for the next batch (the keypoint channels were such a tensor).
"""

from __future__ import annotations

import functools
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator

import cv2
import numpy as np
import torch

from ..models.tasks import task_spec
from ..processing.geometry import BOX_PADDING
from .augment import Jitter, _window, dense_batch, heatmap_batch, normalise, pose_batch
from .data import DenseSet, PoseSet
from .shared_arrays import SharedArrays
from .threads import usable_cores


def default_workers() -> int:
    """One worker process per core beyond the training thread's own, at most four (batches of crops are cheap
    beside a step; more workers only take cores from the step)."""
    return max(1, min(4, usable_cores() - 1))


def cut_people(data: PoseSet, size: tuple[int, int], jitter: Jitter, padding: float = BOX_PADDING) -> PoseSet:
    """Each person's surroundings as a picture of its own: the disc a jittered crop window can reach (scaled up,
    shifted, turned any way), cut once and shrunk where the picture holds more than twice the detail the input size
    can use. Keypoints and box are moved into the cut: a batch from unshrunk cuts is the batch from the whole
    pictures."""
    h, w = size
    images, boxes, keypoints = [], data.boxes.copy(), data.keypoints.copy()
    for i in range(len(data)):
        centre, window = _window(data.boxes[i], size, padding)
        reach = math.hypot(*window) * ((1 + jitter.scale) / 2 + jitter.shift) + 2
        zoom = min(1.0, 1.5 * w / (window[0] * (1 - min(jitter.scale, 0.5))))  # the finest any crop samples it
        side = max(1, math.ceil(2 * reach * zoom))
        origin = centre - reach if zoom < 1 else np.floor(centre - reach)  # whole pixels: the cut is a copy
        m = np.array([[zoom, 0, -zoom * origin[0]], [0, zoom, -zoom * origin[1]]])
        image = data.images[data.image_of[i]]
        images.append(cv2.warpAffine(image, m, (side, side), flags=cv2.INTER_LINEAR if zoom < 1 else cv2.INTER_NEAREST))
        keypoints[i, :, :2] = (data.keypoints[i, :, :2] - origin) * zoom
        boxes[i] = [*((data.boxes[i, :2] - origin) * zoom), *(data.boxes[i, 2:] * zoom)]
    return PoseSet(images, np.arange(len(data)), boxes, keypoints, data.labelled)


def shrink_pictures(data: DenseSet, size: tuple[int, int], jitter: Jitter) -> DenseSet:
    """Pictures (and their truth) larger than the input size can use, shrunk once: the most a zoom-in asks for
    is 1 / (1 - scale) times the input size."""
    need = max(size) / (1 - min(jitter.scale, 0.5)) * 1.25
    images, targets = [], []
    for image, target in zip(data.images, data.targets, strict=True):
        zoom = need / max(image.shape[:2])
        if zoom < 1:
            dims = (max(1, round(image.shape[1] * zoom)), max(1, round(image.shape[0] * zoom)))
            image = cv2.resize(image, dims, interpolation=cv2.INTER_AREA)
            smooth = target.dtype == np.float32 and target.ndim == 2  # alpha; labels, normals, points: nearest
            target = cv2.resize(target, dims, interpolation=cv2.INTER_AREA if smooth else cv2.INTER_NEAREST)
        images.append(image)
        targets.append(target)
    return DenseSet(images, targets, data.files)


class StepBatches(torch.utils.data.Dataset):
    """Batch number `step` of a training run: its people or pictures drawn and jittered by a generator seeded
    with (seed, step), so any process can make any step's batch."""

    def __init__(
        self, data: PoseSet | DenseSet, task: str, size: tuple[int, int], batch_size: int, seed: int, sigma: float
    ) -> None:
        truth = task_spec(task).truth
        self.jitter = {"keypoints": Jitter(), "normals": Jitter.geometry(), "points": Jitter.geometry()}.get(
            truth, Jitter.whole_picture()
        )
        self.truth, self.keypoints = truth, truth == "keypoints"
        fitted = cut_people(data, size, self.jitter) if self.keypoints else shrink_pictures(data, size, self.jitter)
        self.data = shared(fitted)
        self.size, self.batch_size, self.seed, self.sigma = size, batch_size, seed, sigma
        self.finish_on_device = False  # on CUDA the targets are made there (see `batches`)
        self.channels = torch.from_numpy(np.flatnonzero(data.labelled)) if self.keypoints else None

    def __len__(self) -> int:
        return 2**62  # indexed by step; the sampler says which steps

    def __getitem__(self, step: int) -> tuple[torch.Tensor, ...]:
        rng = np.random.default_rng([self.seed, step])
        items = rng.integers(0, len(self.data), self.batch_size)
        if self.keypoints:
            made = pose_batch(self.data, items, self.size, rng, self.jitter)
        else:
            made = dense_batch(self.data, items, self.truth, self.size, rng, self.jitter)
        return made if self.finish_on_device else self.finish(made)

    def finish(self, batch: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """A made batch as the task's loss takes it, but for the keypoint channels (`batches` adds them where the
        step runs): normalised pixels, and heatmaps from keypoints."""
        if self.keypoints:
            return heatmap_batch(*batch, self.channels.to(batch[0].device), self.sigma)
        return normalise(batch[0]), batch[1]


def shared(data: PoseSet | DenseSet) -> PoseSet | DenseSet:
    """`data` with its pictures (and dense truth) in shared memory, for workers that are not forked."""
    if isinstance(data, PoseSet):
        return PoseSet(SharedArrays(data.images), data.image_of, data.boxes, data.keypoints, data.labelled, data.files)
    return DenseSet(SharedArrays(data.images), SharedArrays(data.targets), data.files)


def worker_context() -> multiprocessing.context.BaseContext | None:
    """A fork server that has imported this module (so a worker starts in milliseconds, not the second or two of
    importing torch and OpenCV); None off Linux and macOS, where the DataLoader's default (spawn) is used."""
    if sys.platform not in ("linux", "darwin"):
        return None
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])  # only until the server first starts: then it is what it is
    return context


def start_worker_server() -> None:
    """Start the fork server now, without waiting for it: its imports then overlap the trainer's own start
    (reading the data, building the model, the first validation) instead of delaying the first step."""
    if worker_context() is not None:
        from multiprocessing import forkserver

        forkserver.ensure_running()


def start_worker(_: int, trainer: int) -> None:
    """A worker leaves Ctrl-C to the trainer, which stops at the end of its step and then shuts the workers down
    (a terminal sends SIGINT to every process of the job; a worker that died of it mid-batch would fail the step
    the trainer is finishing). It ends itself when the trainer is gone (a second Ctrl-C, SIGKILL): its parent is
    the fork server, which torch's DataLoader watches instead, and which waits for its children. Each worker makes
    one batch at a time on one core."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    cv2.setNumThreads(1)
    threading.Thread(target=end_with, args=(trainer,), daemon=True, name="trainer-watch").start()


def end_with(pid: int) -> None:
    while True:
        time.sleep(1.0)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            os._exit(0)


def batches(
    maker: StepBatches, start: int, steps: int, workers: int, device: torch.device
) -> Iterator[tuple[torch.Tensor, ...]]:
    """Steps `start` to `steps`' batches on `device`: made `workers` processes ahead (0: on this thread), in pinned
    memory and copied without waiting on CUDA. On CUDA, crops travel as bytes and keypoints, and pixels are
    normalised and heatmaps drawn there (308 heatmaps a person are far more to copy than its keypoints); on the
    CPU the workers finish the batch, off the training thread. A worker makes one batch at a time on one core
    (torch's DataLoader gives it one thread; `start_worker` sets OpenCV's). The keypoint channels are added here,
    from this process's own tensor: they never travel."""
    cuda = device.type == "cuda"
    maker.finish_on_device = cuda
    loader = torch.utils.data.DataLoader(
        maker,
        batch_size=None,
        sampler=range(start, steps),
        num_workers=workers,
        pin_memory=cuda,
        prefetch_factor=2 if workers else None,
        multiprocessing_context=worker_context() if workers else None,
        worker_init_fn=functools.partial(start_worker, trainer=os.getpid()) if workers else None,
    )
    channels = (maker.channels.to(device),) if maker.keypoints else ()
    for batch in loader:
        moved = tuple(b.to(device, non_blocking=cuda) for b in batch)
        yield (*(maker.finish(moved) if cuda else moved), *channels)
