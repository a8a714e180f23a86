"""An example of your own output: people per frame as `people.csv` in the output folder, written where the built-in
files are, so it gets what they get: a file per segment folder with `outputs.segment_s`, appended to by `run
--resume`, and a fleet worker's fence (a camera moved to another worker is not written here any more).

In a pipeline YAML:

    outputs:
      sinks:
        - {name: people_csv, use: "examples/people_csv_sink.py:PeopleCSV", options: {min_score: 0.3}}
"""

from __future__ import annotations

import csv
from pathlib import Path


class PeopleCSV:
    """An output has three parts: `open(folder, append) -> state` for each folder it writes into, `write(state,
    result)` for each result in frame order, `close(state)` once per folder."""

    def __init__(self, name: str = "people.csv", min_score: float = 0.0) -> None:
        self.name, self.min_score = name, min_score

    def open(self, folder: Path, append: bool):
        """`append`: --resume continues the interrupted run's file (its header is there already)."""
        path = folder / self.name
        file = open(path, "a" if append else "w", newline="")  # closed by close()
        writer = csv.writer(file)
        if not append or path.stat().st_size == 0:
            writer.writerow(["frame", "time_s", "people"])
        return {"file": file, "writer": writer}

    def write(self, state, result) -> None:
        people = [p for p in result.people if p.score >= self.min_score]
        state["writer"].writerow([result.frame.index, round(result.frame.pts_s, 6), len(people)])
        state["file"].flush()  # a crash loses no written row

    def close(self, state) -> None:
        state["file"].close()
