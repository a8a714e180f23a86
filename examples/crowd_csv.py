"""An example of your own stage: how many people each source has in each frame, as a CSV file per source, and the
count on every result (the JSONL and MQTT records carry it under `extra`).

In a pipeline YAML:

    stages:
      - {name: crowd_csv, use: "examples/crowd_csv.py:CrowdCSV", after: events, options: {path: crowd.csv}}

From Python:

    for result in sapiens2_stream.stream("walk.mp4", stages=[CrowdCSV(path="crowd.csv")]):
        print(result.raw.extra["people"])
"""

from __future__ import annotations

import csv


class CrowdCSV:
    """A stage has four parts: `open(source) -> state` once per source, `__call__(state, result)` for each of its
    results in frame order, `close(state)` once at its end, and `replay` (results that --resume draws again:
    False, they were counted by the interrupted run)."""

    name, after, replay = "crowd_csv", "events", False

    def __init__(self, path: str = "crowd.csv", min_score: float = 0.0) -> None:
        self.path, self.min_score = path, min_score

    def open(self, source):
        """`source`: name, uri, output_dir, live, fps. The CSV goes into the source's own output folder."""
        source.output_dir.mkdir(parents=True, exist_ok=True)
        file = open(source.output_dir / self.path, "w", newline="")  # closed by close()
        writer = csv.writer(file)
        writer.writerow(["frame", "time_s", "people", "events"])
        return {"file": file, "writer": writer}

    def __call__(self, state, result) -> None:
        people = [p for p in result.people if p.score >= self.min_score]
        state["writer"].writerow([result.frame.index, round(result.frame.pts_s, 6), len(people), len(result.events)])
        result.extra["people"] = len(people)
        for person in people:
            person.extra["crowd_rank"] = people.index(person) + 1

    def close(self, state) -> None:
        state["file"].close()
