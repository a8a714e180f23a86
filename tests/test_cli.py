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


def test_export_pose2sim_choices_and_default_agree():
    """`--sync` offers what it defaults to (auto), and --help says what auto does; the choices are those of
    outputs.pose2sim in the YAML."""
    from sapiens2_stream.cli import build_parser

    parse = build_parser().parse_args
    assert parse(["export", "pose2sim", "run", "--output", "p"]).sync == "auto"
    for method in ("auto", "motion", "audio", "none"):
        assert parse(["export", "pose2sim", "run", "--output", "p", "--sync", method]).sync == method
    helped = run_cli("export", "pose2sim", "--help")
    text = " ".join(helped.stdout.split())
    assert "{auto,motion,audio,none}" in text and "default: auto: the soundtracks" in text


def test_reading_a_pipeline_file_loads_no_torch(tmp_path):
    """`validate`, `--help` and a configuration error answer without loading torch: the task table, the YAML schema
    and the command line read no model code. Reading a file that names a kind of input and a detector checks them
    against their registries, which are light too (no PyAV, no OpenCV)."""
    spec = tmp_path / "p.yaml"
    spec.write_text("source: {uri: a.mp4, kind: file}\ndetector: {type: yolo}\nmodels: {pose: {source: x}}\n")
    code = (
        "import sys; from sapiens2_stream.runtime.pipeline_config import load_config; "
        f"from sapiens2_stream.cli import build_parser; load_config({str(spec)!r}); "
        "build_parser(); print(sorted(m for m in ('torch', 'av', 'ultralytics', 'cv2') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr
