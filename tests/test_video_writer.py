"""The video writer's background encoding: the same file as encoding in place, every picture encoded before the
file is closed, and an encoder's error raised to the caller (by the next write, or by close) with what was encoded
before it playable."""

from __future__ import annotations

import numpy as np
import pytest

from sapiens2_stream.io.video_writer import VideoWriter, decoded_frames


def pictures(n: int = 12) -> list[np.ndarray]:
    rng = np.random.default_rng(4)
    base = rng.integers(0, 255, (96, 128, 3), dtype=np.uint8)
    return [np.roll(base, 5 * i, axis=1) for i in range(n)]


def test_background_encoding_writes_what_encoding_in_place_writes(tmp_path):
    for background in (False, True):
        writer = VideoWriter(tmp_path / f"{background}.mp4", 10, background=background)
        for i, picture in enumerate(pictures()):
            writer.write(picture, i / 10)
        writer.close()
        assert writer.frames == 12
    in_place, behind = (list(decoded_frames(tmp_path / f"{b}.mp4")) for b in (False, True))
    assert [t for _, t in in_place] == [t for _, t in behind] and len(behind) == 12
    assert all(np.abs(a.astype(int) - b).mean() < 1.0 for (a, _), (b, _) in zip(in_place, behind, strict=True))


def test_an_encoding_error_reaches_the_caller_and_the_file_still_plays(tmp_path):
    seen = []

    def fails_at_the_fifth(rgb):
        seen.append(rgb)
        if len(seen) == 5:
            raise OSError(28, "No space left on device")

    writer = VideoWriter(tmp_path / "v.mp4", 10, on_picture=fails_at_the_fifth, background=True)
    with pytest.raises(OSError, match="No space left"):
        for i, picture in enumerate(pictures(40)):
            writer.write(picture, i / 10)
        writer.close()
    writer.close()  # the file closed, the error said once
    assert [round(t, 1) for _, t in decoded_frames(tmp_path / "v.mp4")] == [0.0, 0.1, 0.2, 0.3, 0.4]
