"""Decoding with PyAV: pts-based frame sampling, resizing, 16 kHz mono audio, images, junk."""

from __future__ import annotations

import io
from pathlib import Path

import av
import numpy as np
import pytest

from contracts.multimodal_pipeline import VideoConfig
from tests.workloads.data.multimodal.synthetic import write_clip, write_image
from workloads.data.multimodal.media import MediaError, decode, encode_jpeg


@pytest.fixture(scope="module")
def clip_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_clip(tmp_path_factory.mktemp("media") / "clip.mp4", 5.0, [(1.0, 2.5)])


def test_frames_are_sampled_by_time_at_the_configured_rate(clip_path: Path) -> None:
    m = decode(str(clip_path), VideoConfig(fps=2, size="48x32"))
    assert m.frames.shape == (10, 32, 48, 3)  # 5 s x 2 fps
    assert m.frames.dtype == np.uint8
    np.testing.assert_allclose(m.frame_times, np.arange(10) * 0.5, atol=1 / 24)
    assert m.source_size == (96, 64)
    assert abs(m.duration - 5.0) < 0.1
    # the pattern changes frame to frame (a moving bar, a brightening ramp)
    assert all(not np.array_equal(a, b) for a, b in zip(m.frames, m.frames[1:], strict=False))


def test_rate_above_the_source_rate_gives_every_frame_once(clip_path: Path) -> None:
    m = decode(str(clip_path), VideoConfig(fps=60, size=32, max_frames=500))
    assert len(m.frames) == 120  # 24 fps x 5 s: never a frame twice
    assert m.frames.shape[1:] == (32, 48, 3)  # short side 32, aspect kept


def test_max_frames_caps_a_video(clip_path: Path) -> None:
    assert len(decode(str(clip_path), VideoConfig(fps=4, max_frames=3)).frames) == 3


def test_audio_is_16k_mono_float32(clip_path: Path) -> None:
    m = decode(str(clip_path), VideoConfig(), want_frames=False)
    assert m.audio.dtype == np.float32 and m.audio.ndim == 1
    assert abs(m.audio.size / 16000 - 5.0) < 0.1  # 24 kHz stereo AAC resampled
    assert len(m.frames) == 0
    loud = np.abs(m.audio[16000:40000]).mean() / np.abs(m.audio[:12000]).mean()
    assert loud > 10  # the planted speech survived AAC and the resampler


def test_a_file_object_decodes_like_a_path(clip_path: Path) -> None:
    a = decode(str(clip_path), VideoConfig(fps=1))
    b = decode(io.BytesIO(clip_path.read_bytes()), VideoConfig(fps=1))
    np.testing.assert_array_equal(a.frames, b.frames)


def test_an_image_is_one_frame(tmp_path: Path) -> None:
    m = decode(str(write_image(tmp_path / "i.png")), VideoConfig(size=30))
    assert m.frames.shape == (1, 30, 40, 3) and not m.has_audio


def test_junk_is_a_media_error_with_ffmpegs_reason(tmp_path: Path) -> None:
    (tmp_path / "x.mp4").write_bytes(b"not a video at all" * 10)
    with pytest.raises(MediaError, match="FFmpeg cannot decode it: Invalid data"):
        decode(str(tmp_path / "x.mp4"), VideoConfig())


def test_jpeg_encoding_round_trips_through_ffmpeg(clip_path: Path) -> None:
    frame = decode(str(clip_path), VideoConfig(fps=1, size="48x32")).frames[2]
    data = encode_jpeg(frame)
    assert data[:2] == b"\xff\xd8"
    with av.open(io.BytesIO(data), mode="r") as c:
        back = next(c.decode(video=0)).to_ndarray(format="rgb24")
    assert back.shape == frame.shape
    assert np.abs(back.astype(int) - frame.astype(int)).mean() < 12
