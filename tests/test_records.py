"""One reading shape: what a run wrote is read back through `io.records` as typed records, the same fields the
writer writes; no other module parses the JSONL lines itself."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import sapiens2_stream as s2
from sapiens2_stream.errors import Sapiens2StreamError
from sapiens2_stream.io.records import read_frames

PACKAGE = Path(s2.__file__).parent


def test_a_runs_records_read_back_are_its_results(tmp_path, tiny_dir):
    """The results a run gave (the Python API's, with angles added by a stage) and results.jsonl read back with
    `read_frames`: the same frames, people, boxes, keypoints (to the 0.01 px the JSONL keeps) and fields."""
    from sapiens2_stream.io.synthetic import make_clip

    clip = tmp_path / "walk.mp4"
    make_clip(clip, frames=8, size=(240, 320), people=2)
    results = list(s2.stream(str(clip), models={"pose": str(tiny_dir["pose"])}, device="cpu", angles=True,
                             detector={"type": "fixed", "boxes": [[40, 10, 60, 100], [150, 20, 60, 100]]},
                             set={"models.pose.input_size": [64, 48]}, output=str(tmp_path / "out")))  # fmt: skip
    records = read_frames(tmp_path / "out" / "results.jsonl")
    assert [r.frame for r in records] == [r.frame_index for r in results] and len(records) == 8
    for record, result in zip(records, results, strict=True):
        assert record.pts == pytest.approx(result.time_s, abs=1e-6) and record.models == result.models
        assert [p.track_id for p in record.people] == [p.track_id for p in result.people]
        for read, given in zip(record.people, result.people, strict=True):
            assert np.allclose(read.box, given.box, atol=0.01) and read.score == pytest.approx(given.score, abs=1e-4)
            assert np.allclose(read.keypoints, given.keypoints, atol=0.006)
            assert np.allclose(read.best, given.smoothed, atol=0.006)
            assert read.fields["angles"]["2d"] == given.angles["2d"]


def test_a_line_that_is_not_a_frame_is_one_clear_error(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text('{"frame": 0, "pts": 0.0, "people": []}\n{"frame": 1, "people": []}\n')
    with pytest.raises(Sapiens2StreamError, match=r"line 2 is not a run's results.jsonl .*KeyError 'pts'"):
        read_frames(path)


def test_no_other_module_parses_the_records_itself():
    """Reading JSONL lines (`parse_lines`, `read_records`, `read_complete_lines`) happens in io/records.py only;
    the others take typed records from it."""
    reading = re.compile(r"\b(parse_lines|read_records|read_complete_lines)\(")
    others = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
              if p.name != "records.py" and reading.search(p.read_text())]  # fmt: skip
    assert others == []
