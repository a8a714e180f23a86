"""Recordings that survive a crash: a real SIGKILL (what the OOM killer or a power cut does) during a file run and
during a live run leaves videos that play up to about a second before the kill and whole JSON lines only;
`--resume` then completes every output; long live runs roll into segments, and retention deletes the oldest."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import av
import numpy as np
import pytest
import yaml

from sapiens2_stream.io.segments import apply_retention
from sapiens2_stream.io.synthetic import make_clip
from sapiens2_stream.io.video_writer import playable_frames
from tests.test_faults import cli
from tests.test_pipeline import read_jsonl, source_summary, video_times


def write_spec(tmp_path, tiny_dir, uri, out, tasks=("pose",), **extra):
    models = {m: {"source": str(tiny_dir[m]), "input_size": [256, 192]} for m in tasks}
    data = {
        "source": {"uri": str(uri)},
        "detector": {"type": "fixed", "boxes": [[40, 40, 60, 150], [180, 50, 60, 150]]},
        "models": models,
        "outputs": {"dir": str(out), "video": {"draw": [*(["seg"] if "seg" in tasks else []), "boxes", "pose"]}},
        **extra,
    }
    path = tmp_path / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def kill_after_lines(spec, jsonl, lines, timeout=180):
    """Start a run, SIGKILL it once the JSONL holds `lines` lines; what the kill left."""
    proc = subprocess.Popen([sys.executable, "-m", "sapiens2_stream.cli", "run", str(spec), "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.time() + timeout
    while time.time() < deadline and (not jsonl.exists() or jsonl.read_bytes().count(b"\n") < lines):
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    text = jsonl.read_text()
    assert text.endswith("\n"), "a partial line after the kill"
    return [json.loads(line) for line in text.splitlines()]


def blocks(image):
    h, w = (s - s % 8 for s in image.shape[:2])
    return image[:h, :w].astype(np.float32).reshape(h // 8, 8, w // 8, 8, 3).mean(axis=(1, 3))


def frames_of(path):
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("clip") / "walk.mp4"
    make_clip(path, frames=150, size=(240, 320), people=2, audio=True)
    return path


def test_sigkill_during_a_file_run_then_resume_completes_every_output(tmp_path, tiny_dir, clip):
    out = tmp_path / "run"
    # the temporal filter off: a resumed run's filter starts afresh where it draws again (the interrupted run's
    # history is not recorded), so its seg layer could not equal an uninterrupted run's
    spec = write_spec(tmp_path, tiny_dir, clip, out, tasks=("pose", "seg"), temporal={"seg": "off"}, outputs={
        "dir": str(out), "tracks": {"enabled": True}, "video": {"draw": ["seg", "boxes", "pose"]}})  # fmt: skip
    records = kill_after_lines(spec, out / "results.jsonl", 70)
    assert [r["frame"] for r in records] == list(range(len(records)))
    playable = playable_frames(out / "annotated.mp4")
    # the killed video plays up to its last complete fragment: within about a second (30 frames) of the kill
    assert len(records) - 45 <= playable <= len(records) and playable >= 30
    with av.open(str(clip)) as c:
        source_times = [float(f.time) for f in c.decode(video=0)]
    with av.open(str(out / "annotated.mp4")) as c:
        killed_times = [float(f.time) for f in c.decode(video=0)]
    assert killed_times == pytest.approx(source_times[: len(killed_times)], abs=1e-3)

    killed = len(records)
    resumed = cli("run", spec, "--resume", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    if playable < killed:
        assert f"annotated.mp4 played {playable}: drawing frames {playable}-{killed - 1} again" in resumed.stderr
    records = read_jsonl(out / "results.jsonl")
    assert [r["frame"] for r in records] == list(range(150))
    assert video_times(out / "annotated.mp4") == pytest.approx(source_times, abs=1e-3)  # one frame per input frame
    with av.open(str(out / "annotated.mp4")) as c:
        assert len(c.streams.audio) == 1  # finalised with the source's audio
    for track in sorted((out / "tracks").glob("*.npz")):
        assert list(np.load(track)["frame_index"]) == list(range(150))
    summary = source_summary(json.loads((out / "summary.json").read_text()))
    assert summary.get("redrawn_frames", 0) == killed - playable and summary["resumed_from_frame"] == killed

    # the frames drawn again look like those of an uninterrupted run (recorded keypoints, seg computed again)
    reference = tmp_path / "reference"
    assert cli("run", write_spec(tmp_path, tiny_dir, clip, reference, tasks=("pose", "seg"), temporal={"seg": "off"}),
               "--no-progress").returncode == 0  # fmt: skip
    got, want = frames_of(out / "annotated.mp4"), frames_of(reference / "annotated.mp4")
    assert len(got) == len(want) == 150
    diffs = [np.abs(blocks(a) - blocks(b)).mean() for a, b in zip(got, want, strict=True)]
    assert max(diffs) < 4, max(diffs)  # encoding differences only (a wrong frame differs by 20 or more)


def test_sigkill_during_a_live_run_leaves_a_playable_video_and_whole_lines(tmp_path, tiny_dir):
    out = tmp_path / "live"
    spec = write_spec(tmp_path, tiny_dir, "lavfi:testsrc2=size=320x240:rate=15,realtime", out)
    records = kill_after_lines(spec, out / "results.jsonl", 45)
    playable = playable_frames(out / "annotated.mp4")
    assert len(records) - 25 <= playable <= len(records) and playable >= 15  # within about a second at 15 fps
    with av.open(str(out / "annotated.mp4")) as c:
        times = [float(f.time) for f in c.decode(video=0)]
    assert times == pytest.approx([r["pts"] for r in records[: len(times)]], abs=1e-3)


def test_live_run_rolls_into_segments_and_retention_deletes_the_oldest(tmp_path, tiny_dir):
    out = tmp_path / "cam"
    spec = write_spec(tmp_path, tiny_dir, "lavfi:testsrc2=size=320x240:rate=15,realtime", out,
                      source={"uri": "lavfi:testsrc2=size=320x240:rate=15,realtime", "max_frames": 15 * 9},
                      outputs={"dir": str(out), "segment_s": 2, "tracks": {"enabled": True},
                               "retention": {"max_gb": 0.0025}},  # a 2 s segment is about 1.2 MB
                      runtime={"policy": "block"})  # every frame written however busy the host  # fmt: skip
    run = cli("run", spec, "--no-progress")
    assert run.returncode == 0, run.stderr
    summary = source_summary(json.loads((out / "summary.json").read_text()))
    segments = sorted(p for p in out.iterdir() if p.is_dir())
    assert all(len(p.name) >= 19 and p.name[10] == "T" for p in segments)
    size = sum(f.stat().st_size for p in segments for f in p.rglob("*") if f.is_file())
    assert size <= 0.0025e9 and len(segments) >= 2  # within the limit, and more than the newest one fits
    kept = []
    for segment in segments:
        records = read_jsonl(segment / "results.jsonl")
        times = video_times(segment / "annotated.mp4")  # finalised: opens and plays
        assert times == pytest.approx([r["pts"] for r in records], abs=1e-3)
        assert records[-1]["pts"] - records[0]["pts"] < 2.0
        assert sorted(p.name for p in segment.iterdir()) == ["annotated.mp4", "results.jsonl", "tracks"]
        kept += [r["frame"] for r in records]
    # the newest segments are kept, the oldest deleted: the kept frames are the last ones written
    assert kept == sorted(kept) and kept[-1] == max(kept) and len(kept) < summary["frames_out"]
    assert summary["frames_out"] + sum(summary["dropped"].values()) == summary["frames_in"] == 135


def test_retention_by_age_keeps_young_segments_and_other_folders(tmp_path):
    names = ["2026-11-28T10-00-00", "2026-11-29T10-00-00", "2026-11-30T09-00-00", "2026-11-30T09-00-00-2", "notes"]
    now = time.time()
    for name, age_h in zip(names, [50, 26, 2, 1, 100], strict=True):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.jsonl").write_text("{}\n")
        os.utime(tmp_path / name, (now - age_h * 3600,) * 2)
    deleted = apply_retention(tmp_path, max_age_h=24, max_gb=None)
    assert sorted(p.name for p in deleted) == names[:2]
    assert sorted(p.name for p in tmp_path.iterdir()) == names[2:]


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PLAYER = """<!doctype html><html><body><script>
async function play(name) {
  const v = document.createElement("video");
  v.muted = true; v.playbackRate = 4; v.src = "/" + name; document.body.appendChild(v);
  const first = await new Promise(r => { v.onloadedmetadata = () => r(v.duration); v.onerror = () => r(-1); });
  await v.play().catch(() => {});
  await new Promise(r => { v.onended = r; v.onerror = r; setTimeout(r, 20000); });
  return {name, first_duration: first, error: v.error ? v.error.code : null, ended: v.ended,
          current: v.currentTime, duration: v.duration, frames: v.getVideoPlaybackQuality().totalVideoFrames};
}
(async () => {
  const out = [];
  for (const name of NAMES) out.push(await play(name));
  await fetch("/result", {method: "POST", body: JSON.stringify(out)});
})();
</script><link rel="stylesheet" href="/wait"></body></html>"""


def play_in_chromium(folder, names, tmp_path):
    """Play each video of `folder` in headless Chromium (served over HTTP on 127.0.0.1); what the page saw."""
    import http.server
    import threading

    result, done = {}, threading.Event()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(folder), **kwargs)

        def log_message(self, *args):
            pass

        def do_GET(self):
            if self.path == "/player.html":
                body = PLAYER.replace("NAMES", json.dumps(names)).encode()
            elif self.path == "/wait":  # holds the page's load event, so --dump-dom waits for the results
                # (linked after the script: an inline script would wait for a stylesheet before it)
                done.wait(90)
                body = b""
            else:
                return super().do_GET()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            result["videos"] = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            done.set()
            self.send_response(204)
            self.end_headers()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                        "--no-first-run", "--disable-background-networking", "--disable-component-update",
                        "--disable-sync", "--autoplay-policy=no-user-gesture-required",
                        f"--user-data-dir={tmp_path / 'chromium'}", "--dump-dom",
                        f"http://127.0.0.1:{server.server_port}/player.html"],
                       capture_output=True, timeout=120)  # fmt: skip
    finally:
        server.shutdown()
    assert done.is_set(), "the page never reported"
    return {v["name"]: v for v in result["videos"]}


@pytest.mark.skipif(not CHROMIUM, reason="needs Debian's chromium (.ci/run installs it)")
def test_killed_and_finished_recordings_play_in_a_browser(tmp_path, tiny_dir, clip):
    killed = tmp_path / "killed"
    records = kill_after_lines(write_spec(tmp_path, tiny_dir, "lavfi:testsrc2=size=320x240:rate=15,realtime",
                                          killed), killed / "results.jsonl", 40)  # fmt: skip
    playable = playable_frames(killed / "annotated.mp4")
    assert playable >= 15 and len(records) >= 40
    finished = tmp_path / "finished"
    spec = write_spec(tmp_path, tiny_dir, clip, finished, source={"uri": str(clip), "max_frames": 45})
    assert cli("run", spec, "--no-progress").returncode == 0
    videos = tmp_path / "served"
    videos.mkdir()
    shutil.copy(killed / "annotated.mp4", videos / "killed.mp4")
    shutil.copy(finished / "annotated.mp4", videos / "finished.mp4")
    seen = play_in_chromium(videos, ["killed.mp4", "finished.mp4"], tmp_path)
    for name, frames in (("killed.mp4", playable), ("finished.mp4", 45)):
        v = seen[name]
        assert v["error"] is None and v["ended"] and v["frames"] == frames, v
        assert v["current"] == pytest.approx(v["duration"], abs=0.1) and v["duration"] >= (frames - 2) / 30, v
    assert seen["finished.mp4"]["first_duration"] == pytest.approx(1.5, abs=0.05)  # known up front: faststart
