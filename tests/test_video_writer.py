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


def test_the_gpus_video_engines_asked_for_where_there_are_none_the_cpu_does_it_and_says_so(tmp_path, tiny_dir,
                                                                                           caplog):  # fmt: skip
    """`source.decoder: nvdec` and `outputs.video.encoder: nvenc` on a machine without NVIDIA's video engines: the
    run completes on the CPU's decoder and x264 (the same frames, a video that plays them all), and says so: the
    source's summary notes how it decoded, the video's output says the encoder it got and why not NVENC, and one
    warning line. Where the engines are (a GPU machine), the same run says it used them."""
    from sapiens2_stream.config import from_dict
    from sapiens2_stream.io.synthetic import make_clip
    from sapiens2_stream.runtime.pipeline import Pipeline
    from sapiens2_stream.runtime.pipeline_config import PipelineConfig
    from tests.test_pipeline import source_summary

    clip = tmp_path / "walk.mp4"
    make_clip(clip, frames=10, size=(240, 320), people=1)

    def run(out, decoder, encoder):
        cfg = from_dict(PipelineConfig, {
            "source": {"uri": str(clip), "decoder": decoder}, "detector": {"type": "full_frame"},
            "models": {"pose": {"source": str(tiny_dir["pose"]), "input_size": [64, 48]}},
            "outputs": {"dir": str(tmp_path / out), "video": {"encoder": encoder}},
        })  # fmt: skip
        return source_summary(Pipeline(cfg).run())

    with caplog.at_level("WARNING", logger="sapiens2_stream"):
        summary = run("gpu", "nvdec", "nvenc")
    plain = run("cpu", "cpu", "cpu")
    (decoded,) = [c for c in summary["conversions"] if c.startswith("decoded on")]
    video = summary["outputs"]["video"]
    if video["encoder"] == "libx264":  # no NVENC here
        assert "NVENC does not open here" in video["why_not"]
        assert [r.getMessage() for r in caplog.records if "encoder nvenc" in r.getMessage()]
    assert decoded.startswith("decoded on the GPU") or "decoder nvdec asked" in decoded
    assert "video" not in plain.get("outputs", {})
    assert not any(c.startswith("decoded") for c in plain.get("conversions", []))
    assert len(list(decoded_frames(tmp_path / "gpu" / "annotated.mp4"))) == 10
    assert len(list(decoded_frames(tmp_path / "cpu" / "annotated.mp4"))) == 10
