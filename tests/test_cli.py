"""The command line as a user runs it: a real process, its exit code and its output."""

import subprocess
import sys


def run_cli(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "sapiens2_stream.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def test_models_lists_sizes_and_hub_ids():
    out = run_cli("models")
    assert out.returncode == 0
    assert "facebook/sapiens2-pose-0.4b" in out.stdout and "facebook/sapiens2-matting-1b" in out.stdout


def test_make_tiny_writes_loadable_checkpoints(tmp_path):
    from sapiens2_stream.models import load_model

    out = run_cli("models", "make-tiny", str(tmp_path))
    assert out.returncode == 0 and "random" in out.stdout
    for task in ("pose", "seg", "normal", "pointmap", "matting", "pretrain"):
        folder = tmp_path / f"sapiens2-{task}-tiny"
        assert (folder / "config.json").exists()
        assert load_model(folder).task == task


def test_usage_error_exits_2_without_traceback():
    out = run_cli("no-such-verb")
    assert out.returncode == 2 and "Traceback" not in out.stderr
