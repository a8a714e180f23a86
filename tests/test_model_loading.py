"""Loading paths, precision, metadata, losses and the errors a bad checkpoint gives."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from sapiens2_stream.errors import Sapiens2StreamError
from sapiens2_stream.models import load_model, pose_loss, preset, seg_loss
from sapiens2_stream.models.checkpoint import infer_config, to_original_keys
from sapiens2_stream.models.config import from_transformers_config, to_transformers_config
from sapiens2_stream.models.tiny import random_model, save_released, tiny_config


def weights_file(folder):
    return next(folder.glob("*.safetensors"))


@pytest.mark.parametrize("task", ["pose", "seg", "normal", "pointmap", "matting", "pretrain"])
def test_folder_and_bare_file_give_the_same_model(tiny_dir, task):
    with_config, bare = load_model(tiny_dir[task]), load_model(weights_file(tiny_dir[task]))
    assert with_config.config == bare.config and with_config.task == task
    x = torch.randn(1, 3, 128, 96)
    with torch.inference_mode():
        a, b = with_config(x), bare(x)
    for name, value in vars(a).items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, getattr(b, name)), name


def test_released_pretrain_files_have_no_backbone_prefix(tiny_dir):
    keys = set(load_file(str(weights_file(tiny_dir["pretrain"]))))
    assert (
        "blocks.0.attn.wq.weight" in keys and "cls_token" in keys and not any(k.startswith("backbone.") for k in keys)
    )


def test_rope_theta_recovered_from_periods_buffer(tmp_path):
    cfg = tiny_config("pretrain")
    cfg = type(cfg)(cfg.task, type(cfg.backbone)(**{**vars(cfg.backbone), "rope_theta": 50.0}))
    path = save_released(random_model(cfg), tmp_path, "m", with_config=False)
    assert load_model(path).config.backbone.rope_theta == 50.0


@pytest.mark.parametrize("task", ["pose", "seg", "normal", "pointmap"])
@pytest.mark.parametrize("size", ["0.4b", "1b", "5b"])
def test_presets_round_trip_through_inference_and_config_json(task, size):
    """Released shapes (built on the meta device) are recovered from tensor shapes alone and from config.json."""
    from sapiens2_stream.models import Sapiens2Network

    config = preset(task, size)
    with torch.device("meta"):
        sd = Sapiens2Network(config).state_dict()
    assert infer_config(sd) == config
    assert from_transformers_config(json.loads(json.dumps(to_transformers_config(config)))) == config


def test_preset_0_4b_matches_reference_parameter_count():
    from sapiens2_stream.models import Sapiens2Network

    with torch.device("meta"):
        backbone = Sapiens2Network(preset("pretrain", "0.4b"))
        pose = Sapiens2Network(preset("pose", "0.4b"))
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(backbone) == 395_450_368  # the reference's 0.4b backbone
    assert count(pose) - count(backbone) == pytest.approx(30.23e6, rel=1e-3)


def test_bf16_close_to_fp32(tiny_dir):
    """bf16 weights and activations stay within 3% relative L2 (5% max) of fp32 on every output."""
    x = torch.randn(2, 3, 256, 192)
    for task, folder in tiny_dir.items():
        ref, low = load_model(folder), load_model(folder, dtype="bf16")
        assert low.backbone.cls_token.dtype == torch.bfloat16
        with torch.inference_mode():
            a, b = ref(x), low(x)
        for name, value in vars(a).items():
            if isinstance(value, torch.Tensor):
                other = getattr(b, name).float()
                assert (value - other).norm() / value.norm() < 0.03, (task, name)
                assert (value - other).abs().max() / value.abs().max() < 0.05, (task, name)


def test_fp16_runs(tiny_dir):
    """fp16 loads and runs (bf16 is the recommended low precision: Sapiens2 was trained in it)."""
    x = torch.randn(1, 3, 128, 96)
    ref, half = load_model(tiny_dir["pose"]), load_model(tiny_dir["pose"], dtype="fp16")
    with torch.inference_mode():
        a, b = ref(x).heatmaps, half(x.half()).heatmaps.float()
    assert half.backbone.cls_token.dtype == torch.float16
    assert (a - b).norm() / a.norm() < 0.01


def test_metadata_exposed_on_pose_and_seg_models(tiny_dir):
    pose, seg = load_model(tiny_dir["pose"]), load_model(tiny_dir["seg"])
    meta = pose.pose_metadata
    assert len(meta.names) == 308 and meta.names[meta.coco17[9]] == "left_wrist" and meta.coco17[9] == 62
    assert sorted(meta.flip_indices) == list(range(308))
    assert all(meta.flip_indices[a] == b and meta.flip_indices[b] == a for a, b in meta.flip_pairs)
    assert seg.seg_metadata.names[0] == "Background" and len(seg.seg_metadata.palette) == 29
    swap = seg.seg_metadata.flip_indices
    assert seg.seg_metadata.names[swap[5]] == "Right_Foot" and seg.seg_metadata.names[5] == "Left_Foot"
    assert pose.seg_metadata is None and seg.pose_metadata is None


def test_pose_loss_accepts_per_keypoint_weights():
    torch.manual_seed(0)
    pred, target = torch.randn(2, 5, 8, 6), torch.randn(2, 5, 8, 6)
    w = torch.rand(2, 5)
    expected = ((pred - target) ** 2 * w[:, :, None, None]).mean()
    assert torch.allclose(pose_loss(pred, target, w), expected)
    assert torch.allclose(pose_loss(pred, target, w[:, :, None, None], loss_weight=10), 10 * expected)
    assert torch.allclose(pose_loss(pred, target), torch.nn.functional.mse_loss(pred, target))


def test_seg_loss_matches_reference_and_ignores_255():
    from tests.reference import reference_model

    ref = reference_model("seg")
    ours = load_model(ref.state_dict())
    x = torch.randn(2, 3, 64, 48)
    labels = torch.randint(0, 29, (2, 40, 30))
    labels[:, :5] = 255
    with torch.no_grad():
        expected = ref(x, labels=labels).loss
        got = seg_loss(ours(x).logits, labels)
    assert abs(got.item() - expected.item()) < 1e-5
    all_ignored = torch.full_like(labels, 255)
    logits = torch.randn(2, 29, 40, 30)
    assert seg_loss(logits, labels) != seg_loss(logits, torch.where(labels == 255, 0, labels))
    assert torch.isnan(seg_loss(logits, all_ignored))  # nothing to learn from: mean over zero pixels


# ---------------------------------------------------------------------------------------------- bad checkpoints


def test_truncated_file(tiny_dir, tmp_path):
    data = weights_file(tiny_dir["pose"]).read_bytes()
    bad = tmp_path / "cut.safetensors"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(Sapiens2StreamError, match="truncated or corrupt"):
        load_model(bad)


def test_empty_file(tmp_path):
    (tmp_path / "empty.safetensors").write_bytes(b"")
    with pytest.raises(Sapiens2StreamError, match="not a safetensors file"):
        load_model(tmp_path / "empty.safetensors")


def test_pickle_is_refused(tiny_dir, tmp_path):
    sd = load_file(str(weights_file(tiny_dir["pose"])))
    torch.save(sd, tmp_path / "model.pt")
    with pytest.raises(Sapiens2StreamError, match="pickle"):
        load_model(tmp_path / "model.pt")
    disguised = tmp_path / "model.safetensors"
    disguised.write_bytes((tmp_path / "model.pt").read_bytes())
    with pytest.raises(Sapiens2StreamError, match="pickle/zip"):
        load_model(disguised)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(Sapiens2StreamError, match="pickle checkpoints are never loaded"):
        load_model(tmp_path)


def test_missing_and_misshaped_tensors_are_all_named(tiny_dir, tmp_path):
    sd = load_file(str(weights_file(tiny_dir["pose"])))
    del sd["backbone.blocks.1.attn.wq.weight"], sd["decode_head.conv_layers.0.bias"]
    sd["backbone.blocks.2.attn.wv.weight"] = torch.zeros(3, 64)
    sd["decode_head.extra.weight"] = torch.zeros(1)
    folder = tmp_path / "m"
    folder.mkdir()
    save_file(sd, str(folder / "m.safetensors"))
    (folder / "config.json").write_text((tiny_dir["pose"] / "config.json").read_text())
    with pytest.raises(Sapiens2StreamError) as err:
        load_model(folder)
    msg = str(err.value)
    for name in (
        "blocks.1.attn.wq.weight",
        "conv_layers.0.bias",
        "blocks.2.attn.wv.weight (3, 64)",
        "decode_head.extra",
    ):
        assert name in msg
    assert "\n" not in msg


def test_wrong_task_and_size(tiny_dir, tmp_path):
    with pytest.raises(Sapiens2StreamError, match="holds a pose model, not seg"):
        load_model(weights_file(tiny_dir["pose"]), task="seg")
    folder = tmp_path / "mismatch"
    folder.mkdir()
    (folder / "w.safetensors").write_bytes(weights_file(tiny_dir["seg"]).read_bytes())
    (folder / "config.json").write_text((tiny_dir["pose"] / "config.json").read_text())
    with pytest.raises(Sapiens2StreamError, match="does not match the model"):
        load_model(folder)


def test_unknown_task(tiny_dir, tmp_path):
    sd = load_file(str(weights_file(tiny_dir["pose"])))
    sd = {k.replace("conv_pose", "conv_albedo"): v for k, v in sd.items()}
    save_file(sd, str(tmp_path / "x.safetensors"))
    with pytest.raises(Sapiens2StreamError, match="unknown task"):
        load_model(tmp_path / "x.safetensors")


def test_hub_id_while_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(Sapiens2StreamError, match="not in the local Hugging Face cache and HF_HUB_OFFLINE is set"):
        load_model("facebook/sapiens2-pose-0.4b")


def test_missing_path():
    with pytest.raises(Sapiens2StreamError, match="no such file or folder"):
        load_model("/nonexistent/model.safetensors")


def test_transformers_layout_round_trips_to_original(tiny_dir):
    """Our key conversion of a transformers state_dict gives back exactly the released tensors."""
    from tests.reference import reference_model

    ref = reference_model("pointmap")
    converted = to_original_keys(ref.state_dict())
    ours = load_model(ref.state_dict())
    assert set(converted) == set(ours.state_dict())
