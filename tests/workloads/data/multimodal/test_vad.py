"""Silero VAD finds the speech planted in a synthetic soundtrack, and nothing in silence."""

from __future__ import annotations

import numpy as np
import pytest

from contracts.multimodal_pipeline import AudioConfig
from tests.workloads.data.multimodal.synthetic import soundtrack
from workloads.data.multimodal.vad import SpeechDetector, split_long

PLANTED = [(0.8, 2.6), (3.6, 5.2)]


def iou(a: tuple[float, float], b: tuple[float, float]) -> float:
    inter = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    return inter / (max(a[1], b[1]) - min(a[0], b[0]))


@pytest.fixture(scope="module")
def detector() -> SpeechDetector:
    return SpeechDetector(AudioConfig())


def test_planted_speech_is_found(detector: SpeechDetector) -> None:
    found = detector.segments(soundtrack(6.0, PLANTED))
    assert len(found) == len(PLANTED), found
    for got, want in zip(found, PLANTED, strict=True):
        assert iou(got, want) > 0.85, (got, want)


def test_silence_and_faint_noise_are_no_speech(detector: SpeechDetector) -> None:
    assert detector.segments(np.zeros(16000 * 3, np.float32)) == []
    assert detector.segments(soundtrack(3.0, [])) == []


def test_long_segments_are_split_to_the_window() -> None:
    assert split_long([(0.0, 65.0), (70.0, 71.0)], 30.0) == [
        (0.0, 65 / 3),
        (65 / 3, 130 / 3),
        (130 / 3, 65.0),
        (70.0, 71.0),
    ]
    assert split_long([(1.0, 31.0)], 30.0) == [(1.0, 31.0)]


def test_split_long_applies_inside_the_detector() -> None:
    short = SpeechDetector(AudioConfig(max_segment_seconds=1.0))
    found = short.segments(soundtrack(6.0, PLANTED))
    assert all(b - a <= 1.0 + 1e-9 for a, b in found)
    assert len(found) == 4  # 1.8 s and 1.6 s (plus padding) become two pieces each
