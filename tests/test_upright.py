"""Phone videos and photos upright, non-square pixels made square: our frames against FFmpeg's own upright decode
(its command line applies the display matrix and can scale to square pixels) and Pillow's EXIF transpose."""

import subprocess

import av
import imageio_ffmpeg
import numpy as np
import pytest
from PIL import Image, ImageOps

from sapiens2_stream.io.options import SourceConfig
from sapiens2_stream.io.sources import Source
from sapiens2_stream.io.synthetic import make_clip
from sapiens2_stream.runtime.pipeline import Pipeline
from tests.test_pipeline import config, read_jsonl, source_summary

FFMPEG = imageio_ffmpeg.get_ffmpeg_exe()


def ffmpeg(*args):
    subprocess.run([FFMPEG, "-loglevel", "error", "-y", *map(str, args)], check=True)


def ffmpeg_frame(path, vf=None):
    """FFmpeg's own decode of the first frame, as its players show the video (display matrix applied), as RGB."""
    png = path.with_suffix(".first.png")
    ffmpeg("-i", path, *(["-vf", vf] if vf else []), "-frames:v", "1", png)
    with Image.open(png) as img:
        return np.asarray(img.convert("RGB"))


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("upright") / "landscape.mp4"
    make_clip(path, frames=6, size=(240, 320), people=1)
    return path


TAGS = {
    "rotate90": ["-display_rotation", "90"], "rotate180": ["-display_rotation", "180"],
    "rotate270": ["-display_rotation", "270"], "mirror": ["-display_hflip"],
    "rotate90-mirror": ["-display_rotation", "90", "-display_hflip"],
}  # fmt: skip


@pytest.mark.parametrize("tag", list(TAGS))
def test_display_rotation_is_applied_like_ffmpeg(tmp_path, clip, tag):
    tagged = tmp_path / f"{tag}.mp4"
    ffmpeg(*TAGS[tag], "-i", clip, "-c", "copy", tagged)  # the display matrix only: not re-encoded
    source = Source(SourceConfig(uri=str(tagged)))
    ours = next(source.frames()).rgb
    expected = ffmpeg_frame(tagged)
    assert ours.shape == expected.shape
    assert np.abs(ours.astype(int) - expected).mean() < 0.5
    stored = next(Source(SourceConfig(uri=str(clip))).frames()).rgb  # the tag really changes the picture:
    assert stored.shape != ours.shape or np.abs(stored.astype(int) - ours).mean() > 10
    assert any("upright" in c for c in source.stats.conversions)


def test_portrait_phone_video_through_the_pipeline(tmp_path, tiny_dir, clip):
    tagged = tmp_path / "portrait.mp4"
    ffmpeg("-display_rotation", "90", "-i", clip, "-c", "copy", tagged)
    cfg = config(tmp_path, tiny_dir, tagged, detector={"type": "full_frame"}, outputs={"video": {"draw": []}})
    summary = source_summary(Pipeline(cfg).run())
    records = read_jsonl(tmp_path / "out" / "results.jsonl")
    assert records[0]["people"][0]["box"] == [0, 0, 240, 320]  # the upright frame: 240 wide, 320 high
    with av.open(str(tmp_path / "out" / "annotated.mp4")) as video:
        first = next(video.decode(video=0)).to_ndarray(format="rgb24")
    assert first.shape == (320, 240, 3)
    assert np.abs(first.astype(int) - ffmpeg_frame(tagged)).mean() < 3  # H.264 re-encoding only
    assert summary["conversions"] == ["turned 90 degrees counterclockwise to show them upright, as the video's "
                                      "display matrix says"]  # fmt: skip


def test_non_square_pixels_are_made_square(tmp_path, clip):
    wide = tmp_path / "anamorphic.mp4"
    ffmpeg("-i", clip, "-vf", "setsar=2/1", "-c:v", "libx264", "-preset", "ultrafast", wide)
    source = Source(SourceConfig(uri=str(wide)))
    ours = next(source.frames()).rgb
    expected = ffmpeg_frame(wide, "scale=iw*sar:ih:flags=bicubic,setsar=1")
    assert ours.shape == expected.shape == (240, 640, 3)
    blocks = lambda im: im.astype(np.float32).reshape(30, 8, 80, 8, 3).mean(axis=(1, 3))  # noqa: E731
    assert np.abs(blocks(ours) - blocks(expected)).mean() < 1.5  # resampling filters differ slightly
    assert source.stats.conversions == ["resampled to square pixels (sample aspect ratio 2:1, 320x240 stored, "
                                        "640x240 shown)"]  # fmt: skip


def test_photos_follow_their_exif_orientation(tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    rng = np.random.default_rng(0)
    base = np.zeros((60, 80, 3), np.uint8)
    base[:30, :40] = 255  # a marker in one corner, so every orientation looks different
    base += rng.integers(0, 20, base.shape, dtype=np.uint8)
    for orientation in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = orientation
        Image.fromarray(base).save(folder / f"p{orientation}.png", exif=exif.tobytes())
    source = Source(SourceConfig(uri=str(folder)))
    frames = list(source.frames())
    assert len(frames) == 8
    for orientation, frame in zip(range(1, 9), frames, strict=True):
        with Image.open(folder / f"p{orientation}.png") as img:
            expected = np.asarray(ImageOps.exif_transpose(img).convert("RGB"))
        assert np.array_equal(frame.rgb, expected), orientation
    assert source.stats.conversions == ["photos shown upright as their EXIF orientation says"]
