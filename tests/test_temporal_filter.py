"""The temporal filter in a run (the `temporal:` section): which outputs it steadies, that a run's outputs are what
the public `DenseStabilizer` makes of the models' own outputs (each source with its own history), part labels
steadied at a reduced size, frames wider than the working width, people who appear or leave, the summary's cost
line, and the one-line refusals."""

import re

import numpy as np
import pytest

from sapiens2_stream.config import from_dict
from sapiens2_stream.errors import Sapiens2StreamError
from sapiens2_stream.io.sources import Frame
from sapiens2_stream.io.synthetic import make_clip
from sapiens2_stream.runtime.pipeline import Pipeline
from sapiens2_stream.runtime.pipeline_config import PipelineConfig, check_config
from sapiens2_stream.runtime.progress import format_summary
from sapiens2_stream.runtime.results import FrameResult, Person
from sapiens2_stream.runtime.task_sections import TemporalConfig
from sapiens2_stream.runtime.temporal_filter import TemporalFilter, filtered_outputs, upsampled_labels
from sapiens2_stream.temporal import DenseStabilizer
from tests.test_temporal import STILL, H, W, alpha_metrics, labels_video, miou, video

DENSE = ("matting", "normal", "pointmap")


def cfg_for(tiny_dir, sources, tasks=DENSE, **sections):
    data = {
        "sources": sources,
        "detector": {"type": "full_frame"},
        "models": {m: {"source": str(tiny_dir[m]), "input_size": [128, 96], "max_batch": 4} for m in tasks},
        "outputs": {"dir": "out", "video": {"enabled": False}},
        **sections,
    }
    return from_dict(PipelineConfig, data)


def outputs_of(cfg) -> list[str]:
    return filtered_outputs(cfg.temporal, cfg.enabled_models(), cfg.source)


def test_auto_steadies_videos_and_cameras_not_photo_folders(tiny_dir, tmp_path):
    (tmp_path / "photos").mkdir()
    sources = [{"name": "file", "uri": "walk.mp4"}, {"name": "camera", "uri": "lavfi:testsrc2=size=320x240"},
               {"name": "photos", "uri": str(tmp_path / "photos")}]  # fmt: skip
    every = ["alpha", "normal", "pointmap"]
    cfg = cfg_for(tiny_dir, sources)
    assert [sorted(outputs_of(c)) for c in cfg.per_source()] == [every, every, []]
    cfg = cfg_for(tiny_dir, sources, temporal={"alpha": "on", "normal": "off"})
    steadied = [sorted(outputs_of(c)) for c in cfg.per_source()]
    assert steadied == [["alpha", "pointmap"], ["alpha", "pointmap"], ["alpha"]]
    # an output whose model does not run is never steadied (and `on` for it is refused, below)
    assert outputs_of(cfg_for(tiny_dir, sources[:1], tasks=("pose",)).per_source()[0]) == []


@pytest.mark.parametrize(
    "temporal, message",
    [
        ({"seg": "on"}, "temporal.seg is on but models.seg is not enabled"),
        ({"new_weight": 0}, "temporal.new_weight must be above 0"),
        ({"seg_width": 8}, "temporal.seg_width must be at least 16"),
        ({"width": 8}, "temporal.width must be at least 32"),
    ],
)
def test_bad_temporal_settings_are_refused_in_one_line(tiny_dir, temporal, message):
    with pytest.raises(Sapiens2StreamError, match=message) as error:
        check_config(cfg_for(tiny_dir, [{"name": "a", "uri": "a.mp4"}], temporal=temporal), "p.yaml")
    assert "\n" not in str(error.value)
    with pytest.raises(Sapiens2StreamError, match="temporal.alpha"):  # not one of auto, on, off
        cfg_for(tiny_dir, [{"name": "a", "uri": "a.mp4"}], temporal={"alpha": "sometimes"})


def test_a_runs_filtered_outputs_are_the_public_stabilisers_per_source(tiny_dir, tmp_path, monkeypatch):
    """Two clips in one run: each source's steady matte, normals and depth equal `DenseStabilizer` run over that
    source's own frames and raw model outputs (recorded as the filter received them): the frames in order, one
    history per source, nothing shared between them."""
    clips = {}
    for i, name in enumerate(("a", "b")):
        clips[name] = tmp_path / f"{name}.mp4"
        make_clip(clips[name], frames=12 + 4 * i, size=(120, 160), people=1 + i)
    raw: dict[str, list] = {"a": [], "b": []}
    apply = TemporalFilter.apply

    def recording(self, result):
        raw[result.source].append((result.frame.rgb.copy(), result.alpha.copy(), result.foreground.copy(),
                                   result.normals.copy(), result.pointmap.copy()))  # fmt: skip
        apply(self, result)

    monkeypatch.setattr(TemporalFilter, "apply", recording)
    steady: dict[str, list] = {"a": [], "b": []}
    cfg = cfg_for(tiny_dir, [{"name": n, "uri": str(p)} for n, p in clips.items()],
                  outputs={"dir": str(tmp_path / "out"), "video": {"enabled": False}})  # fmt: skip
    keep = lambda r, _: steady[r.source].append((r.alpha, r.foreground, r.normals, r.pointmap))  # noqa: E731
    summary = Pipeline(cfg, on_result=keep).run()
    for name in ("a", "b"):
        assert len(raw[name]) == len(steady[name]) == 12 + 4 * (name == "b")
        alpha, normal, depth = DenseStabilizer("alpha"), DenseStabilizer("normal"), DenseStabilizer("depth")
        for (frame, a, fg, n, pm), (sa, sfg, sn, spm) in zip(raw[name], steady[name], strict=True):
            assert np.allclose(sa, alpha(frame, a), atol=1e-6)
            assert np.allclose(sn, normal(frame, n), atol=1e-6)
            z, sz = pm[..., 2], depth(frame, pm[..., 2])
            moved = (z > 1e-3) & (sz / np.where(z > 1e-3, z, 1) > 0.5) & (sz / np.where(z > 1e-3, z, 1) < 2)
            assert moved.mean() > 0.1 and np.allclose(spm[..., 2][moved], sz[moved], rtol=1e-4, atol=1e-5)
            # the points move along their rays, and the foreground keeps its colour under the steady alpha
            assert np.allclose(spm[moved][:, :2] / spm[moved][:, 2:], pm[moved][:, :2] / pm[moved][:, 2:], atol=1e-3)
            both = (a > 0.02) & (sa > 0.02)
            colour = fg[both] / a[both][:, None]  # premultiplied: colour times alpha
            assert np.allclose(sfg[both] / sa[both][:, None], colour, atol=1e-3)
        assert not np.allclose(steady[name][-1][0], raw[name][-1][1])  # it did something
        source = summary["sources"][name]
        assert set(source["temporal"]) == {"flow_ms_per_frame", "alpha", "normal", "pointmap"}
        assert source["temporal"]["alpha"]["ms_per_frame"] > 0 and "temporal" in source["stage_ms_per_frame"]
    assert re.search(r"temporal filter: .*alpha [0-9.]+ ms", format_summary(summary))


def result_at(index, frame, people=(), ended=(), **dense):
    f = Frame(index=index, pts_s=index / 30, wall_s=0.0, rgb=frame)
    return FrameResult(f, [Person(t, np.array(b, np.float32), 0.9) for t, b in people], ended_tracks=list(ended),
                       **dense)  # fmt: skip


def test_part_labels_are_steadied_at_a_reduced_size_and_keep_their_full_size_detail():
    """The bands of tests/test_temporal (logits whose margin shrinks at the boundaries, plus noise): the full-size
    labels (the argmax of the logits, as the engine gives them) flip 80% less often in still frames with the
    steady half-size probabilities, at no loss of mIoU; a frame after a cut is the model's own."""
    frames, truth, logits = labels_video(5)
    filters = TemporalFilter(TemporalConfig(), ["seg"])
    raw, out = [], []
    for t, (frame, value) in enumerate(zip(frames, logits, strict=True)):
        small = np.exp(value[:, ::2, ::2]) / np.exp(value[:, ::2, ::2]).sum(0)
        result = result_at(t, frame, seg=value.argmax(0).astype(np.uint8), seg_probabilities=small)
        raw.append(result.seg)
        filters.apply(result)
        assert result.seg.shape == truth[0].shape and result.seg_probabilities is None
        out.append(result.seg)
    raw, out = np.array(raw), np.array(out)
    flips = lambda lab: float((lab[STILL] != lab[: STILL.stop - 1]).mean())  # noqa: E731
    assert flips(out) <= 0.2 * flips(raw), (flips(raw), flips(out))
    assert miou(out, truth) >= miou(raw, truth) - 0.01
    other = np.ascontiguousarray(frames[0][::-1, ::-1] // 2)  # another scene
    value = logits[10][:, ::-1, ::-1]
    own = value.argmax(0).astype(np.uint8)
    small = np.exp(value[:, ::2, ::2]) / np.exp(value[:, ::2, ::2]).sum(0)
    cut = result_at(len(frames), other, seg=own.copy(), seg_probabilities=small)
    filters.apply(cut)
    assert np.array_equal(cut.seg, own)


@pytest.mark.parametrize("small, large", [((18, 32), (120, 160)), ((36, 64), (37, 65)), ((20, 30), (20, 30))])
def test_labels_enlarged_as_the_engine_enlarges_logits(small, large):
    """Oracle: torch's bilinear resize (half-pixel centres) of all the class probabilities, then argmax. Where the
    four nearest small pixels agree the class is exact; elsewhere it is chosen among their classes, which misses a
    class that wins none of them and yet wins their blend (rare: at most 0.5% of the pixels of these random maps)."""
    import cv2
    import torch
    import torch.nn.functional as F

    rng = np.random.default_rng(1)
    logits = cv2.GaussianBlur(rng.normal(0, 1, (*small, 7)).astype(np.float32), (0, 0), 1.5) * 8
    probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    expected = F.interpolate(torch.from_numpy(probabilities).permute(2, 0, 1)[None], size=large, mode="bilinear",
                             align_corners=False)[0].argmax(0).numpy()  # fmt: skip
    got = upsampled_labels(probabilities, probabilities.argmax(-1).astype(np.uint8), large)
    assert got.shape == large and got.dtype == np.uint8
    assert (got == expected).mean() >= 0.995


def test_no_history_where_a_person_appears_or_was_lost():
    """A still scene (no change in the picture): where a new person's box is, and where a lost person's last box
    was, the output is the model's own on that frame; elsewhere the history smooths it."""
    rng = np.random.default_rng(0)
    frame = (rng.random((96, 128, 3)) * 255).astype(np.uint8)
    filters = TemporalFilter(TemporalConfig(), ["normal"])
    box = (40, 30, 20, 30)  # x, y, w, h
    inside = (slice(27, 63), slice(38, 62))  # the box less a pixel of the margin it is enlarged by
    outside = (slice(0, 20), slice(0, 30))

    def step(t, people=(), ended=()):
        n = rng.normal(0, 0.2, (96, 128, 3)).astype(np.float32) + np.array([0, 0, 1], np.float32)
        n /= np.linalg.norm(n, axis=-1, keepdims=True)
        result = result_at(t, frame, people, ended, normals=n.copy())
        filters.apply(result)
        return n, result.normals

    for t in range(5):
        step(t, [(1, (0, 0, 10, 10))])
    n, steady = step(5, [(1, (0, 0, 10, 10)), (2, box)])  # person 2 appears
    assert np.allclose(steady[inside], n[inside], atol=1e-6) and not np.allclose(steady[outside], n[outside])
    for t in range(6, 9):
        n, steady = step(t, [(1, (0, 0, 10, 10)), (2, box)])
        assert not np.allclose(steady[inside], n[inside])  # known now: smoothed
    n, steady = step(9, [(1, (0, 0, 10, 10))], ended=[2])  # person 2 lost
    assert np.allclose(steady[inside], n[inside], atol=1e-6) and not np.allclose(steady[outside], n[outside])


def test_a_frame_wider_than_the_working_width_is_steadied_through_its_enlarged_change():
    """The synthetic matte video of tests/test_temporal filtered at half its width (as a 1280-wide camera is at
    the default 640): still clearly steadier (flicker -40%, dtSSD -20%, MESSDdt -25%) at no loss of accuracy
    (5%, moving 15%), and the model's own matte wherever the filter had no history (the first frame, a cut)."""
    frames, truth, model, motion = video(6)
    filters = TemporalFilter(TemporalConfig(width=W // 2), ["alpha"])
    out = []
    for t, (frame, alpha) in enumerate(zip(frames, model, strict=True)):
        result = result_at(t, frame, [(1, (0, 0, W, H))], alpha=alpha)
        filters.apply(result)
        out.append(result.alpha)
    assert np.array_equal(out[0], model[0]) and filters.stabilisers["alpha"].resets == 0
    raw, steady = alpha_metrics(model, truth, motion), alpha_metrics(np.array(out), truth, motion)
    assert steady["flicker"] <= 0.6 * raw["flicker"] and steady["dtssd"] <= 0.8 * raw["dtssd"], (raw, steady)
    assert steady["messddt"] <= 0.75 * raw["messddt"], (raw, steady)
    assert steady["mad"] <= 1.05 * raw["mad"] and steady["moving_mad"] <= 1.15 * raw["moving_mad"], (raw, steady)
    other = np.ascontiguousarray(frames[0][::-1, ::-1] // 2)  # another scene
    cut = result_at(len(frames), other, [(1, (0, 0, W, H))], alpha=model[5])
    filters.apply(cut)
    assert np.array_equal(cut.alpha, model[5])
