"""CLIP and Whisper stages without Ray, on tiny models saved to a directory; weights' digests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from contracts.multimodal_pipeline import ModelsConfig
from tests.workloads.data.multimodal.synthetic import (
    pattern_frame,
    soundtrack,
    tiny_clip_dir,
    tiny_whisper_dir,
)
from workloads.data.multimodal.asr import Transcriber
from workloads.data.multimodal.clip import FrameEmbedder
from workloads.data.multimodal.models import ModelPathError, check_model_dir, model_digest


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {"clip": tiny_clip_dir(root / "clip"), "whisper": tiny_whisper_dir(root / "whisper")}


def test_clip_embeddings_are_unit_fp32_on_cpu(models: dict[str, Path]) -> None:
    e = FrameEmbedder(models["clip"], "auto", batch_size=3)
    frames = np.stack([pattern_frame(i, 48, 32) for i in range(7)])
    emb = e.embed(frames)
    assert e.device == "cpu"
    assert emb.shape == (7, 16) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    # batching does not change the result; different frames give different embeddings
    np.testing.assert_allclose(
        FrameEmbedder(models["clip"], "cpu", 7).embed(frames), emb, atol=1e-5
    )
    assert not np.allclose(emb[0], emb[3])
    assert e.embed(frames[:0]).shape == (0, 16)


def test_cuda_requested_without_cuda_is_refused(models: dict[str, Path]) -> None:
    with pytest.raises(RuntimeError, match="no CUDA device"):
        FrameEmbedder(models["clip"], "cuda", 1)


def test_whisper_gives_one_string_per_segment(models: dict[str, Path]) -> None:
    t = Transcriber(models["whisper"], ModelsConfig(language="en"), "cpu", batch_size=2)
    wave = soundtrack(3.0, [(0.5, 2.5)])
    texts = t.transcribe([wave[:8000], wave[8000:40000], wave[40000:]])
    assert len(texts) == 3 and all(isinstance(x, str) for x in texts)
    assert t.window_seconds == 30


def test_digest_covers_config_and_weights(models: dict[str, Path], tmp_path: Path) -> None:
    d = model_digest(str(models["clip"]))
    assert {"config.json", "model.safetensors", "preprocessor_config.json"} <= set(d["files"])
    assert d == model_digest(str(models["clip"]))
    other = tiny_clip_dir(tmp_path / "clip2", projection_dim=8)
    assert model_digest(str(other))["sha256"] != d["sha256"]


def test_a_directory_without_a_model_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ModelPathError, match="no such model directory"):
        check_model_dir(str(tmp_path / "nope"))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelPathError, match="no weights"):
        check_model_dir(str(tmp_path))
