"""Files a stage makes, written by the outputs: a stage that ends with files (a track's angles when the track ends)
does not open them itself; it hands a job to its source's `FileOutbox`, and the `stage_files` sink of the folder
being written (the output folder, or the current segment's, opened behind a fleet worker's fence) runs it there.
So those files roll with the segments, are never written by a worker that lost its camera, and are off wherever
the other files are."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .sink import Sink


@dataclass(frozen=True)
class FileJob:
    """Files for `subfolder` of the folder being written: `write(folder)` makes them there."""

    subfolder: str
    write: Callable[[Path], object]


class FileOutbox:
    """A source's jobs waiting for its outputs (put by its stages, taken by its `stage_files` sink: both on the
    source's writer thread, so nothing is shared)."""

    def __init__(self) -> None:
        self.jobs: list[FileJob] = []

    def put(self, subfolder: str, write: Callable[[Path], object]) -> None:
        self.jobs.append(FileJob(subfolder, write))

    def take(self) -> list[FileJob]:
        jobs, self.jobs = self.jobs, []
        return jobs


class StageFilesSink(Sink):
    """Runs the jobs waiting in `outbox` into `folder`, at each result written and at the end."""

    def __init__(self, folder: Path, outbox: FileOutbox) -> None:
        self.folder, self.outbox = folder, outbox

    def write(self, result) -> None:
        self.run()

    def close(self) -> None:
        self.run()

    def run(self) -> None:
        """Every job waiting; one that fails does not keep the others from being written, and the first failure
        is raised after them (the outputs say it once, for this sink)."""
        failures: list[Exception] = []
        run_jobs(self.outbox.take(), self.folder, lambda job, e: failures.append(e))
        if failures:
            raise failures[0]


def run_jobs(jobs: list[FileJob], folder: Path, failed: Callable[[FileJob, Exception], None]) -> None:
    """Each job into its subfolder of `folder`; a job that raises is told to `failed` and the rest go on."""
    for job in jobs:
        try:
            job.write(folder / job.subfolder)
        except Exception as e:
            failed(job, e)
