"""Speech recognition of VAD segments with `transformers` Whisper, batched.

`Transcriber` loads WhisperForConditionalGeneration, its WhisperFeatureExtractor and tokenizer
from a local directory once per actor (fp16 on CUDA, fp32 on the CPU). Each speech segment
(at most `max_segment_seconds`, Whisper's 30 s window, after `vad.split_long`) becomes one log-
mel input padded to the window; `generate` runs on `asr_batch_size` segments at a time with
the configured language and task, and the tokens are decoded without special tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from contracts.multimodal_pipeline import ModelsConfig
from workloads.data.multimodal.devices import actor_device, torch_dtype


class Transcriber:
    """Whisper, loaded once: `transcribe(segments)` gives one string per waveform."""

    def __init__(self, model_dir: Path, models: ModelsConfig, device: str, batch_size: int) -> None:
        import torch
        from transformers import (
            AutoTokenizer,
            WhisperFeatureExtractor,
            WhisperForConditionalGeneration,
        )

        self.device = actor_device(device)
        self.dtype = torch_dtype(self.device)
        model: Any = WhisperForConditionalGeneration.from_pretrained(
            str(model_dir), dtype=self.dtype, local_files_only=True
        )
        self._model = model.to(self.device)
        self._model.eval()
        self._features = WhisperFeatureExtractor.from_pretrained(
            str(model_dir), local_files_only=True
        )
        self._tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        self._models = models
        self._batch = batch_size
        self._torch = torch

    @property
    def window_seconds(self) -> float:
        """The longest input the feature extractor keeps (30 s for every Whisper)."""
        return float(self._features.chunk_length)

    def transcribe(self, segments: list[npt.NDArray[np.float32]]) -> list[str]:
        """One transcript per 16 kHz waveform, in order."""
        torch = self._torch
        kwargs: dict[str, Any] = {"task": self._models.task}
        if self._models.language:
            kwargs["language"] = self._models.language
        if self._models.max_new_tokens:
            kwargs["max_new_tokens"] = self._models.max_new_tokens
        texts: list[str] = []
        with torch.inference_mode():
            for i in range(0, len(segments), self._batch):
                chunk = [np.ascontiguousarray(s, np.float32) for s in segments[i : i + self._batch]]
                feats = self._features(
                    chunk, sampling_rate=self._features.sampling_rate, return_tensors="pt"
                ).input_features.to(self.device, self.dtype)
                ids = self._model.generate(feats, **kwargs)
                if not isinstance(ids, torch.Tensor):
                    ids = ids.sequences
                decoded = self._tokenizer.batch_decode(ids, skip_special_tokens=True)
                texts.extend(" ".join(t.split()) for t in decoded)
        return texts
