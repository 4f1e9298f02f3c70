"""Voice activity detection with Silero VAD, and cutting speech into Whisper-sized segments.

Silero's JIT model ships inside the `silero-vad` package (`load_silero_vad()` reads it from
the package's data directory: nothing downloads). It is small and runs on the CPU; it is
loaded once per actor (`SpeechDetector`), because loading per file costs more than running it.
`get_speech_timestamps` works on the whole 16 kHz waveform and returns sample offsets.

Whisper sees at most 30 s at a time, so `split_long` cuts a longer segment into equal pieces
no longer than `max_segment_seconds`; each piece is then transcribed on its own.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from contracts.multimodal_pipeline import AudioConfig


class SpeechDetector:
    """Silero VAD, loaded once: `segments(wave)` gives speech (start, end) in seconds."""

    def __init__(self, audio: AudioConfig) -> None:
        import torch
        from silero_vad import load_silero_vad

        torch.set_num_threads(1)
        self._audio = audio
        self._model = load_silero_vad()

    def segments(self, wave: npt.NDArray[np.float32]) -> list[tuple[float, float]]:
        """Speech intervals of a 16 kHz mono waveform, in time order, in seconds."""
        import torch
        from silero_vad import get_speech_timestamps

        if wave.size < 512:
            return []
        vad = self._audio.vad
        found: list[dict[str, Any]] = get_speech_timestamps(
            torch.from_numpy(np.ascontiguousarray(wave, np.float32)),
            self._model,
            threshold=vad.threshold,
            sampling_rate=self._audio.sample_rate,
            min_speech_duration_ms=vad.min_speech_ms,
            min_silence_duration_ms=vad.min_silence_ms,
            speech_pad_ms=vad.speech_pad_ms,
        )
        sr = self._audio.sample_rate
        spans = [(int(s["start"]) / sr, int(s["end"]) / sr) for s in found]
        return split_long(spans, self._audio.max_segment_seconds)


def split_long(spans: list[tuple[float, float]], max_seconds: float) -> list[tuple[float, float]]:
    """Each span longer than `max_seconds` cut into the fewest equal pieces that fit."""
    out: list[tuple[float, float]] = []
    for start, end in spans:
        pieces = max(1, math.ceil((end - start) / max_seconds - 1e-9))
        step = (end - start) / pieces
        out.extend((start + i * step, start + (i + 1) * step) for i in range(pieces))
    return out
