"""Tiny random Sapiens2 checkpoints in the released layout, for smoke tests without downloads (and the starting
point of the toy models, `models/toy.py`).

The weights are random: the outputs have the right shapes and types but mean nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from .checkpoint import rope_periods, split_pretrain_prefix
from .config import ModelConfig, to_transformers_config
from .network import Sapiens2Network
from .shapes import BackboneConfig
from .tasks import TASKS, task_spec

TINY_BACKBONE = BackboneConfig(hidden_size=64, num_layers=4, num_heads=4, kv_heads=(4, 2, 2, 4), mlp_dim=128)


def tiny_config(task: str) -> ModelConfig:
    """A few-hundred-thousand-parameter model of `task` that still runs at 1024x768 (its head: the table's
    `tiny_head`)."""
    return ModelConfig(task, TINY_BACKBONE, task_spec(task).tiny_head)


def random_model(config: ModelConfig, seed: int = 0) -> Sapiens2Network:
    """A randomly initialised model; tokens get small random values so they are not all zero."""
    torch.manual_seed(seed)
    model = Sapiens2Network(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("cls_token", "storage_tokens")):
                p.normal_(std=0.02)
    return model.eval()


def released_state_dict(model: Sapiens2Network) -> dict[str, torch.Tensor]:
    """The state_dict as the released files lay it out (pretrain without prefix, RoPE periods included)."""
    sd = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    b = model.config.backbone
    sd["backbone.rope_embed.periods"] = rope_periods(b.rope_theta, b.head_dim)
    return split_pretrain_prefix(sd) if model.task == "pretrain" else sd


def save_released(model: Sapiens2Network, folder: Path, name: str, with_config: bool = True) -> Path:
    """Write `folder/<name>.safetensors` (and config.json) as the hub lays out a release; returns the file."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.safetensors"
    save_file(released_state_dict(model), str(path), metadata={"format": "pt"})
    if with_config:
        (folder / "config.json").write_text(json.dumps(to_transformers_config(model.config), indent=2))
    return path


def make_tiny_checkpoints(out_dir: str | Path, tasks: tuple[str, ...] | None = None, seed: int = 0) -> dict[str, Path]:
    """One folder per task (default: every task of the table), `sapiens2-<task>-tiny/`, with config.json and
    `sapiens2_tiny_<task>.safetensors`."""
    out = Path(out_dir)
    tasks = tuple(TASKS) if tasks is None else tasks
    folders = {}
    for i, task in enumerate(tasks):
        folder = out / f"sapiens2-{task}-tiny"
        save_released(random_model(tiny_config(task), seed + i), folder, f"sapiens2_tiny_{task}")
        folders[task] = folder
    return folders
