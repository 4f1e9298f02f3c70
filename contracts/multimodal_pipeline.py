"""The multimodal pipeline's configuration: one validated, frozen model read from YAML or JSON.

The RayJob mounts this file from a ConfigMap and passes it as `--config`; `load_config` turns
any mistake into one `MultimodalConfigError` line naming the key path and what would be right,
before Ray is even started. `config_hash` is what the manifest records, so two outputs can be
compared knowing whether they came from the same settings.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from contracts import pipeline

Stage = Literal["frames", "clip", "vad", "asr"]
ALL_STAGES: tuple[Stage, ...] = ("frames", "clip", "vad", "asr")
_WXH = re.compile(r"^(\d+)x(\d+)$")


MultimodalConfigError = pipeline.PipelineConfigError
"""A config file that cannot be read or does not validate: one line."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class VideoConfig(_Strict):
    """How frames are sampled from each video (and how an image file becomes one frame)."""

    fps: Annotated[float, Field(gt=0, le=120)] = Field(
        1.0, description="Frames sampled per second of video, selected by presentation time."
    )
    size: int | str = Field(
        224,
        description=(
            "Sampled frame size: an int is the short side (aspect kept, long side rounded to "
            "even), 'WxH' is an exact size. CLIP's processor resizes again to its own input."
        ),
    )
    max_frames: Annotated[int, Field(ge=1)] = Field(
        256, description="At most this many frames per video (the first ones in time)."
    )

    @field_validator("size")
    @classmethod
    def _size_is_short_side_or_wxh(cls, v: int | str) -> int | str:
        if isinstance(v, int):
            if not 8 <= v <= 4096:
                raise ValueError(f"short side {v} is outside 8..4096")
            return v
        m = _WXH.match(v.strip())
        if m is None or not all(8 <= int(g) <= 8192 for g in m.groups()):
            raise ValueError(f"{v!r} is neither a short side (int) nor 'WxH' like '320x240'")
        return v.strip()

    def frame_size(self, width: int, height: int) -> tuple[int, int]:
        """The (width, height) a source frame of this size is converted to."""
        if isinstance(self.size, str):
            m = _WXH.match(self.size)
            assert m is not None  # checked by the validator
            return int(m.group(1)), int(m.group(2))
        short = self.size
        if width <= height:
            return short, max(2, 2 * round(height * short / width / 2))
        return max(2, 2 * round(width * short / height / 2)), short


class VadConfig(_Strict):
    """Silero VAD's `get_speech_timestamps` settings."""

    threshold: Annotated[float, Field(gt=0, lt=1)] = Field(
        0.5, description="Speech probability above which a 32 ms window counts as speech."
    )
    min_speech_ms: Annotated[int, Field(ge=0)] = Field(
        250, description="Speech shorter than this is dropped."
    )
    min_silence_ms: Annotated[int, Field(ge=0)] = Field(
        100, description="Silence shorter than this does not end a segment."
    )
    speech_pad_ms: Annotated[int, Field(ge=0)] = Field(
        30, description="Padding added to each side of a segment."
    )


class AudioConfig(_Strict):
    """How the audio track is decoded and cut into speech segments."""

    sample_rate: Literal[16000] = Field(
        16000, description="Decoded mono rate: Silero VAD and Whisper both want 16 kHz."
    )
    vad: VadConfig = Field(default_factory=VadConfig, description="Voice activity detection.")
    max_segment_seconds: Annotated[float, Field(gt=0, le=30)] = Field(
        30.0,
        description="Longer speech segments are split into pieces this long: Whisper's window.",
    )


class ModelsConfig(_Strict):
    """Where the models come from: a Hugging Face directory on FSx, or an s3:// prefix."""

    clip: str | None = Field(
        None,
        description=(
            "CLIP model directory (config.json, weights, preprocessor_config.json) or s3:// "
            "prefix, copied to local disk once per worker. Required when 'clip' runs."
        ),
    )
    whisper: str | None = Field(
        None,
        description=(
            "Whisper model directory (config, weights, generation config, feature extractor, "
            "tokenizer) or s3:// prefix. Required when 'asr' runs."
        ),
    )
    language: str | None = Field(
        None, description="Whisper language (e.g. 'en'); None lets the model detect it."
    )
    task: Literal["transcribe", "translate"] = Field("transcribe", description="Whisper task.")
    max_new_tokens: Annotated[int, Field(ge=1, le=444)] | None = Field(
        None, description="Token limit per segment; None uses the model's generation config."
    )


class ComputeConfig(_Strict):
    """Devices, batch sizes and how many actors each model stage runs."""

    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="'auto' uses CUDA when the Ray cluster has GPUs, else the CPU."
    )
    clip_batch_size: Annotated[int, Field(ge=1)] = Field(
        64, description="Frames per CLIP forward pass."
    )
    asr_batch_size: Annotated[int, Field(ge=1)] = Field(
        8, description="Speech segments per Whisper generate call."
    )
    files_per_batch: Annotated[int, Field(ge=1)] = Field(
        1, description="Media files handed to a model actor at a time."
    )
    decode_cpus: Annotated[float, Field(gt=0)] = Field(
        1.0, description="CPUs reserved by each decode task (FFmpeg)."
    )
    clip_actors: Annotated[int, Field(ge=1)] = Field(1, description="CLIP actors (concurrency).")
    vad_actors: Annotated[int, Field(ge=1)] = Field(1, description="Silero VAD actors.")
    asr_actors: Annotated[int, Field(ge=1)] = Field(1, description="Whisper actors.")
    gpus_per_actor: Annotated[float, Field(gt=0, le=8)] = Field(
        1.0, description="GPUs each CLIP/Whisper actor requests when on CUDA (may be 0.5)."
    )


class OutputsConfig(_Strict):
    """What is written besides embeddings, segments and the manifest."""

    frames: Literal["none", "jpeg", "npy"] = Field(
        "none", description="Also write the sampled frames: JPEG files, or one uint8 .npy."
    )


class MultimodalPipelineConfig(_Strict):
    """Everything `python -m workloads.data.multimodal --config FILE` reads from FILE."""

    video: VideoConfig = Field(default_factory=VideoConfig, description="Frame sampling.")
    audio: AudioConfig = Field(default_factory=AudioConfig, description="Audio and VAD.")
    models: ModelsConfig = Field(default_factory=ModelsConfig, description="Model paths.")
    compute: ComputeConfig = Field(default_factory=ComputeConfig, description="Devices, actors.")
    outputs: OutputsConfig = Field(default_factory=OutputsConfig, description="Extra outputs.")
    stages: tuple[Stage, ...] = Field(
        ALL_STAGES,
        description="Stages that run: frames (sampling), clip (needs frames), vad, asr (needs vad)",
    )

    @model_validator(mode="after")
    def _stages_have_what_they_need(self) -> MultimodalPipelineConfig:
        s = set(self.stages)
        if len(s) != len(self.stages):
            raise ValueError("stages: listed twice; list each of frames, clip, vad, asr once")
        if "clip" in s and "frames" not in s:
            raise ValueError("stages: 'clip' needs 'frames'")
        if "asr" in s and "vad" not in s:
            raise ValueError("stages: 'asr' needs 'vad'")
        if "clip" in s and not self.models.clip:
            raise ValueError("models.clip: required when stage 'clip' runs (a model directory)")
        if "asr" in s and not self.models.whisper:
            raise ValueError("models.whisper: required when stage 'asr' runs (a model directory)")
        return self

    def runs(self, stage: Stage) -> bool:
        """Whether `stage` is enabled."""
        return stage in self.stages

    def config_hash(self) -> str:
        """sha256 of the canonical JSON of every field, defaults included."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


def parse_config(data: Any, source: str = "config") -> MultimodalPipelineConfig:
    """Validate a mapping; errors become one `MultimodalConfigError` line."""
    return pipeline.parse_config(data, MultimodalPipelineConfig, source)


def load_config(path: str | Path) -> MultimodalPipelineConfig:
    """Read a .yaml/.yml/.json file and validate it."""
    return pipeline.load_config(path, MultimodalPipelineConfig)
