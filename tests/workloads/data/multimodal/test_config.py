"""The pipeline config: defaults, sizes, and one-line errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts.multimodal_pipeline import (
    MultimodalConfigError,
    MultimodalPipelineConfig,
    VideoConfig,
    load_config,
    parse_config,
)

MODELS = {"clip": "/m/clip", "whisper": "/m/whisper"}


def test_defaults_are_16k_audio_and_whisper_window() -> None:
    c = parse_config({"models": MODELS})
    assert c.audio.sample_rate == 16000
    assert c.audio.max_segment_seconds == 30
    assert c.stages == ("frames", "clip", "vad", "asr")
    assert c.compute.device == "auto"


def test_size_short_side_keeps_aspect_and_wxh_is_exact() -> None:
    assert VideoConfig(size=32).frame_size(96, 64) == (48, 32)
    assert VideoConfig(size=32).frame_size(64, 96) == (32, 48)
    assert VideoConfig(size="40x30").frame_size(96, 64) == (40, 30)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"models": MODELS, "video": {"fsp": 2}}, "video.fsp: unknown key"),
        ({"models": MODELS, "video": {"size": "big"}}, "video.size"),
        ({"models": {"whisper": "/w"}}, "models.clip: required when stage 'clip' runs"),
        ({"models": MODELS, "stages": ["clip"]}, "'clip' needs 'frames'"),
        ({"models": MODELS, "audio": {"sample_rate": 8000}}, "audio.sample_rate"),
        ({"models": MODELS, "compute": {"device": "tpu"}}, "compute.device"),
    ],
)
def test_bad_config_is_one_line_naming_the_key(data: dict, expected: str) -> None:
    with pytest.raises(MultimodalConfigError) as e:
        parse_config(data, "cfg.yaml")
    assert expected in str(e.value)
    assert "\n" not in str(e.value)
    assert str(e.value).startswith("cfg.yaml: ")


def test_only_vad_needs_no_model_paths() -> None:
    c = parse_config({"stages": ["vad"]})
    assert c.runs("vad") and not c.runs("asr")


def test_load_config_reads_yaml_and_json(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("video:\n  fps: 2\nstages: [frames]\n")
    (tmp_path / "c.json").write_text('{"video": {"fps": 2}, "stages": ["frames"]}')
    a, b = load_config(tmp_path / "c.yaml"), load_config(tmp_path / "c.json")
    assert a == b and a.video.fps == 2
    assert (
        a.config_hash()
        == b.config_hash()
        != MultimodalPipelineConfig(stages=("vad",)).config_hash()
    )


def test_unreadable_or_malformed_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(MultimodalConfigError, match="cannot read the config file"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("video: [unclosed\n")
    with pytest.raises(MultimodalConfigError, match="not valid YAML") as e:
        load_config(tmp_path / "bad.yaml")
    assert "\n" not in str(e.value)
