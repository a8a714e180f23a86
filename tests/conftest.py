"""Shared test setup: never touch the network; reference models come from transformers (test-only)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("YOLO_AUTOINSTALL", "0")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # Ray keeps 127.0.0.1 instead of the outward address

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """Tiny random checkpoints for every task, in the released layout (config.json + safetensors)."""
    from sapiens2_stream.models import make_tiny_checkpoints

    out = tmp_path_factory.mktemp("tiny")
    return make_tiny_checkpoints(out)


def read_jsonl(path):
    import json

    return [json.loads(line) for line in path.read_text().splitlines()]


def run_on_clip(folder, video, truth, models: str):
    """`sapiens2-stream run` on a synthetic clip, its boxes from the clip's truth; `models` the YAML's models
    mapping (flow style); the results land in folder/run."""
    import subprocess
    import sys

    pipeline = folder / "p.yaml"
    pipeline.write_text(
        f"source: {{uri: {video}}}\ndetector: {{type: file, path: {truth}}}\nmodels: {models}\n"
        f"outputs: {{dir: {folder / 'run'}}}\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "sapiens2_stream.cli", "run", str(pipeline), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    return read_jsonl(folder / "run" / "results.jsonl")
