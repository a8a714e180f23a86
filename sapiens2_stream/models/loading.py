"""`load_model`: a Sapiens2 model from a hub id, a local folder, a single safetensors file or a state_dict.

Only safetensors are read (never pickle). Every tensor name and shape is checked, and one error names all
that is missing, unexpected or mis-shaped.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

import torch

from ..errors import Sapiens2StreamError
from .checkpoint import IGNORED, check_state_dict, infer_config, to_original_keys
from .config import ModelConfig, from_transformers_config
from .network import Sapiens2Network

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
          "fp16": torch.float16, "float16": torch.float16}  # fmt: skip


def resolve_dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise Sapiens2StreamError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    return DTYPES[dtype]


def check_safetensors(path: Path) -> None:
    """Refuse a file that is not safetensors (a pickle can run code) from its first bytes, before reading it."""
    if path.suffix in PICKLE_SUFFIXES:
        raise Sapiens2StreamError(
            f"{path}: pickle checkpoints are never loaded (they can run code); use the .safetensors release"
        )
    with open(path, "rb") as f:
        head = f.read(9)
    if len(head) < 9 or head[8:9] != b"{":
        kind = "a pickle/zip file" if head[:2] in (b"PK", b"\x80\x02", b"\x80\x04") else "not a safetensors file"
        raise Sapiens2StreamError(f"{path}: {kind}; only .safetensors checkpoints are loaded")


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """Read one safetensors file, refusing pickles and explaining truncated or corrupt files."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    check_safetensors(path)
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise Sapiens2StreamError(f"{path}: truncated or corrupt safetensors file ({e}); download it again") from None


def _folder_weights(folder: Path, config: dict | None) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [folder / s for s in shards]
    if config and config.get("transformers_weights"):
        return [folder / config["transformers_weights"]]
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        pickles = [p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES]
        hint = f" (found {', '.join(pickles)}: pickle checkpoints are never loaded)" if pickles else ""
        raise Sapiens2StreamError(f"{folder}: no .safetensors file in this folder{hint}")
    if len(files) > 1:
        preferred = [f for f in files if f.name == "model.safetensors"]
        if not preferred:
            names = ", ".join(f.name for f in files)
            raise Sapiens2StreamError(f"{folder}: several checkpoints ({names}); pass the file you want")
        files = preferred
    return files


def _download(repo_id: str, revision: str | None) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

    try:
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=["*.safetensors", "*.json"]))
    except LocalEntryNotFoundError:
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
        why = "HF_HUB_OFFLINE is set" if offline else "the hub cannot be reached"
        raise Sapiens2StreamError(
            f"{repo_id} is not in the local Hugging Face cache and {why}; download it where the hub is reachable "
            f"(huggingface-cli download {repo_id}) or pass a local folder or .safetensors file"
        ) from None
    except RepositoryNotFoundError:
        raise Sapiens2StreamError(f"{repo_id}: no such model on the Hugging Face hub (check the id)") from None
    except (HfHubHTTPError, OSError) as e:
        raise Sapiens2StreamError(f"{repo_id}: download failed ({type(e).__name__}); check the network") from None


def locate_checkpoint(
    source: str | os.PathLike, revision: str | None = None, download: bool = True
) -> tuple[list[Path], dict | None] | None:
    """The safetensors files of a hub id, a folder or a file and the folder's transformers config (or None), each
    file's first bytes checked. A hub id not on disk is downloaded, or with `download=False` left alone (None):
    `validate` asks no network."""
    path = Path(source).expanduser()
    if not path.exists():
        if not (isinstance(source, str) and HUB_ID.match(source)):
            raise Sapiens2StreamError(
                f"{source}: no such file or folder (and not a hub id like facebook/sapiens2-pose-0.4b)"
            )
        if not download:
            return None
        path = _download(source, revision)
    if path.is_file():
        files, config = [path], None
    else:
        config_path = path / "config.json"
        config = json.loads(config_path.read_text()) if config_path.exists() else None
        files = _folder_weights(path, config)
    for file in files:
        check_safetensors(file)
    return files, config


def read_checkpoint(source: str | os.PathLike, revision: str | None = None) -> tuple[dict, dict | None]:
    """(state_dict, transformers config dict or None) from a hub id, a folder or a file."""
    files, config = locate_checkpoint(source, revision)
    sd: dict[str, torch.Tensor] = {}
    for file in files:
        sd.update(read_safetensors(file))
    return sd, config


def build_model(
    state_dict: Mapping[str, torch.Tensor],
    config: ModelConfig | None = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | str = torch.float32,
) -> Sapiens2Network:
    """A model with exactly these weights (original or transformers layout); config inferred if not given."""
    sd = to_original_keys(state_dict, config.task if config else None)
    config = config or infer_config(sd)
    dtype = resolve_dtype(dtype)
    with torch.device("meta"):
        model = Sapiens2Network(config)
    check_state_dict(model.state_dict(), sd)
    weights = {
        k: v.to(device=device, dtype=dtype if v.is_floating_point() else v.dtype)
        for k, v in sd.items()
        if not IGNORED.match(k)
    }
    model.load_state_dict(weights, strict=True, assign=True)
    return model.eval()


def load_model(
    source: str | os.PathLike | Mapping[str, torch.Tensor],
    device: torch.device | str = "cpu",
    dtype: torch.dtype | str = torch.float32,
    task: str | None = None,
    revision: str | None = None,
) -> Sapiens2Network:
    """Load a Sapiens2 model for inference.

    `source`: a hub id (`facebook/sapiens2-pose-0.4b`; honours HF_HUB_OFFLINE and the HF cache), a folder with
    safetensors (and usually config.json), a single `.safetensors` file (all shapes inferred from its tensors), or
    a state_dict of original or transformers key names. `task` overrides or checks the task.
    """
    if isinstance(source, Mapping):
        sd, hf_config = dict(source), None
    else:
        sd, hf_config = read_checkpoint(source, revision)
    if not sd:
        raise Sapiens2StreamError(f"{source}: the checkpoint holds no tensors")
    config = from_transformers_config(hf_config, task) if hf_config else None
    if config is None and task is not None:
        config = infer_config(to_original_keys(sd, task), task)
    return build_model(sd, config, device, dtype)
