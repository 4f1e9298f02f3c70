"""The whole pipeline on Ray Data, run through its CLI on media and models made in the test.

The run happens once per module (Ray is slow on 2 cores) and many tests read its output: a
5 s H.264+AAC clip with speech planted at 0.8-2.4 s and 3.2-4.6 s, a PNG, a corrupt .mp4 and a
text file, with tiny CLIP and Whisper directories loaded the way production loads them. A
second identical run checks that manifest and segments are byte-for-byte deterministic.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from tests.workloads.data.multimodal.synthetic import (
    tiny_clip_dir,
    tiny_whisper_dir,
    write_clip,
    write_image,
)
from workloads.data.multimodal.__main__ import main

PLANTED = [(0.8, 2.4), (3.2, 4.6)]
SECONDS, FPS = 5.0, 2.0


def _config(models: Path) -> dict[str, Any]:
    return {
        "video": {"fps": FPS, "size": "48x32", "max_frames": 64},
        "models": {
            "clip": str(models / "clip"),
            "whisper": str(models / "whisper"),
            "language": "en",
            "max_new_tokens": 4,
        },
        "compute": {"device": "auto", "clip_batch_size": 4, "asr_batch_size": 2},
        "outputs": {"frames": "jpeg"},
    }


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, ray_local: None) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("multimodal")
    media = root / "media"
    (media / "sub").mkdir(parents=True)
    write_clip(media / "talk.mp4", SECONDS, PLANTED)
    write_image(media / "sub" / "still.png")
    (media / "broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"garbage" * 50)
    (media / "notes.txt").write_text("not media")
    tiny_clip_dir(root / "models" / "clip")
    tiny_whisper_dir(root / "models" / "whisper")
    cfg = root / "config.yaml"
    cfg.write_text(yaml.safe_dump(_config(root / "models")))
    codes = [
        main(["--config", str(cfg), "--input", str(media), "--output", str(root / out)])
        for out in ("out", "again")
    ]
    return {"root": root, "out": root / "out", "codes": codes, "config": cfg, "media": media}


@pytest.fixture(scope="module")
def manifest(run: dict[str, Any]) -> dict[str, Any]:
    return json.loads((run["out"] / "manifest.json").read_text())


def _file(manifest: dict[str, Any], path: str) -> dict[str, Any]:
    return next(f for f in manifest["files"] if f["path"] == path)


def test_a_corrupt_file_is_recorded_not_fatal(run: dict[str, Any], manifest: dict) -> None:
    assert run["codes"] == [0, 0]
    bad = _file(manifest, "broken.mp4")
    assert bad["status"] == "failed"
    assert bad["error"].startswith("decode: FFmpeg cannot decode it")
    assert manifest["totals"] | {"embedding_dtypes": None} == {
        "files": 3,
        "ok": 2,
        "failed": 1,
        "ignored_not_media": 1,
        "frames": 11,
        "segments": 2,
        "transcripts": 2,
        "embedding_dtypes": None,
    }
    assert [f["path"] for f in manifest["files"]] == ["broken.mp4", "sub/still.png", "talk.mp4"]


def test_frames_sampled_match_duration_times_fps(run: dict[str, Any], manifest: dict) -> None:
    talk = _file(manifest, "talk.mp4")
    assert abs(talk["frames"] - SECONDS * FPS) <= 1
    assert talk["frame_size"] == [48, 32]
    times = np.load(run["out"] / "items/talk.mp4/frame_times.npy")
    assert times.dtype == np.float64 and len(times) == talk["frames"]
    np.testing.assert_allclose(np.diff(times), 1 / FPS, atol=1 / 24)
    jpegs = sorted((run["out"] / "items/talk.mp4/frames").iterdir())
    assert len(jpegs) == talk["frames"] and jpegs[0].name == "000000.jpg"
    assert _file(manifest, "sub/still.png")["frames"] == 1


def test_embeddings_are_unit_fp32_frames_by_projection_dim(run: dict, manifest: dict) -> None:
    for path, n in (("talk.mp4", 10), ("sub/still.png", 1)):
        meta = _file(manifest, path)["embeddings"]
        emb = np.load(run["out"] / meta["file"])
        assert emb.shape == (n, 16) and meta["shape"] == [n, 16]
        assert emb.dtype == np.float32 and meta["dtype"] == "float32"
        np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    assert manifest["totals"]["embedding_dtypes"] == ["float32"]
    assert _file(manifest, "talk.mp4")["device"] == "cpu"


def test_speech_segments_overlap_the_planted_ones(run: dict[str, Any]) -> None:
    lines = (run["out"] / "segments.jsonl").read_text().splitlines()
    segs = [json.loads(x) for x in lines]
    assert [s["path"] for s in segs] == ["talk.mp4", "talk.mp4"]
    for s, (a, b) in zip(segs, PLANTED, strict=True):
        # Silero's 30 ms pad on each side, 32 ms windows
        assert abs(s["start"] - a) < 0.1 and abs(s["end"] - b) < 0.1, (s, a, b)
        assert isinstance(s["text"], str)
    assert segs[0]["end"] < segs[1]["start"]  # the silence between them is no segment


def test_manifest_names_models_with_digests(run: dict[str, Any], manifest: dict) -> None:
    assert manifest["format"] == "llmp.multimodal/v1"
    assert manifest["stages"] == ["frames", "clip", "vad", "asr"]
    for name in ("clip", "whisper"):
        m = manifest["models"][name]
        assert m["path"] == str(run["root"] / "models" / name)
        assert len(m["sha256"]) == 64 and "model.safetensors" in m["files"]
    assert manifest["models"]["vad"]["package"] == "silero-vad"
    assert manifest["config"]["video"]["fps"] == FPS and len(manifest["config_sha256"]) == 64
    assert not list(run["out"].glob(".*.tmp"))


def test_a_second_run_writes_the_same_bytes(run: dict[str, Any]) -> None:
    for name in ("manifest.json", "segments.jsonl", "items/talk.mp4/clip.npy"):
        assert (run["out"] / name).read_bytes() == (run["root"] / "again" / name).read_bytes()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workloads.data.multimodal", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_bad_config_key_is_one_line(run: dict[str, Any], tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("video:\n  fsp: 2\n")
    r = _cli("--config", str(cfg), "--input", str(run["media"]), "--output", str(tmp_path))
    assert r.returncode == 2
    assert r.stderr.strip() == f"multimodal: {cfg}: video.fsp: unknown key (got 2)"


def test_cli_missing_model_path_is_one_line(run: dict[str, Any], tmp_path: Path) -> None:
    data = _config(tmp_path / "nowhere")
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(data))
    r = _cli("--config", str(cfg), "--input", str(run["media"]), "--output", str(tmp_path))
    assert r.returncode == 2
    assert r.stderr.strip() == f"multimodal: {tmp_path}/nowhere/clip: no such model directory"


def test_cli_not_a_media_file_is_one_line(run: dict[str, Any], tmp_path: Path) -> None:
    for target in (run["media"] / "notes.txt", run["media"] / "broken.mp4"):
        r = _cli("--config", str(run["config"]), "--input", str(target), "--output", str(tmp_path))
        assert r.returncode == 2
        assert len(r.stderr.strip().splitlines()) == 1
        assert r.stderr.startswith(f"multimodal: {target}: not a media file (FFmpeg: ")
    r = _cli("--config", str(run["config"]), "--input", str(tmp_path), "--output", str(tmp_path))
    assert r.returncode == 2 and "no media files in it" in r.stderr
    assert not (tmp_path / "manifest.json").exists()
