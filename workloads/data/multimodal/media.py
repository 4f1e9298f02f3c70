"""Decoding with FFmpeg through PyAV: frames sampled by presentation time, audio at 16 kHz mono.

One pass over the container demuxes both streams. A video frame is kept when its presentation
time (pts x time_base) reaches the next sampling instant k / fps, so a variable-frame-rate
file is sampled by time, not by frame count; frames are converted and resized by FFmpeg's
swscale (`VideoFrame.reformat`) to RGB. The audio stream goes through `av.AudioResampler` to
float32 mono at the configured rate, what Silero VAD and Whisper's feature extractor expect.
An image file (JPEG, PNG) is a one-frame video to FFmpeg and becomes one sampled frame.

Files are opened through pyarrow's filesystem layer, so a path may be local (FSx) or s3://.
A file FFmpeg cannot read raises `MediaError` with FFmpeg's reason in one line; the pipeline
records it in the manifest as failed instead of stopping the job.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import IO, Any

import av
import numpy as np
import numpy.typing as npt

from contracts.multimodal_pipeline import VideoConfig

VIDEO_EXTENSIONS = frozenset({".mp4", ".mkv", ".mov", ".webm", ".avi", ".m4v", ".ts"})
AUDIO_EXTENSIONS = frozenset({".wav", ".mp3", ".flac", ".m4a", ".ogg", ".opus", ".aac"})
IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp"})
MEDIA_EXTENSIONS = VIDEO_EXTENSIONS | AUDIO_EXTENSIONS | IMAGE_EXTENSIONS


class MediaError(Exception):
    """FFmpeg could not read the file: one line, FFmpeg's own reason."""


@dataclass
class DecodedMedia:
    """What one file holds after sampling: frames [n, H, W, 3] uint8 and 16 kHz mono audio."""

    frames: npt.NDArray[np.uint8]
    frame_times: npt.NDArray[np.float64]
    audio: npt.NDArray[np.float32]
    duration: float
    has_video: bool
    has_audio: bool
    source_size: tuple[int, int] = field(default=(0, 0))


def _frame_time(frame: av.VideoFrame, index: int, rate: float) -> float:
    if frame.pts is not None and frame.time_base is not None:
        return float(frame.pts * frame.time_base)
    return index / rate if rate > 0 else 0.0


def decode(
    source: str | IO[bytes],
    video: VideoConfig,
    *,
    sample_rate: int = 16000,
    want_frames: bool = True,
    want_audio: bool = True,
) -> DecodedMedia:
    """Decode `source` (a local path or a binary file object) in one pass over its streams."""
    try:
        return _decode(source, video, sample_rate, want_frames, want_audio)
    except av.FFmpegError as e:
        raise MediaError(f"FFmpeg cannot decode it: {_ffmpeg_reason(e)}") from None


def _ffmpeg_reason(e: av.FFmpegError) -> str:
    text = getattr(e, "strerror", None) or str(e)
    return " ".join(str(text).split())


def _decode(
    source: str | IO[bytes],
    video: VideoConfig,
    sample_rate: int,
    want_frames: bool,
    want_audio: bool,
) -> DecodedMedia:
    with av.open(source, mode="r") as container:
        vstream = container.streams.video[0] if container.streams.video else None
        astream = container.streams.audio[0] if container.streams.audio else None
        if vstream is None and astream is None:
            raise MediaError("no video or audio stream in it")
        streams: list[Any] = []
        if vstream is not None and want_frames:
            vstream.thread_type = "AUTO"
            streams.append(vstream)
        if astream is not None and want_audio:
            streams.append(astream)
        rate = float(vstream.average_rate) if vstream is not None and vstream.average_rate else 0
        resampler = av.AudioResampler(format="flt", layout="mono", rate=sample_rate)
        frames: list[npt.NDArray[np.uint8]] = []
        times: list[float] = []
        chunks: list[npt.NDArray[np.float32]] = []
        next_k, index, last_time = 0, 0, 0.0
        source_size = (0, 0)
        for packet in container.demux(streams) if streams else ():
            for frame in packet.decode():
                if isinstance(frame, av.VideoFrame):
                    t = _frame_time(frame, index, rate)
                    index += 1
                    last_time = max(last_time, t)
                    # 1 ms of slack: pts are rounded to the stream's time base.
                    if len(frames) >= video.max_frames or t + 1e-3 < next_k / video.fps:
                        continue
                    source_size = (frame.width, frame.height)
                    w, h = video.frame_size(frame.width, frame.height)
                    rgb = frame.reformat(width=w, height=h, format="rgb24")
                    frames.append(np.asarray(rgb.to_ndarray(), np.uint8))
                    times.append(t)
                    next_k = math.floor(t * video.fps + 1e-3) + 1
                elif isinstance(frame, av.AudioFrame):
                    for out in resampler.resample(frame):
                        chunks.append(out.to_ndarray().reshape(-1).astype(np.float32))
        if streams and astream is not None and want_audio:
            for out in resampler.resample(None):
                chunks.append(out.to_ndarray().reshape(-1).astype(np.float32))
        audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
        duration = _duration(container, last_time, rate, audio.size / sample_rate)
        if frames:
            stacked = np.stack(frames)
        else:
            w, h = video.frame_size(*(source_size if source_size[0] else (2, 2)))
            stacked = np.zeros((0, h, w, 3), np.uint8)
        return DecodedMedia(
            frames=stacked,
            frame_times=np.asarray(times, np.float64),
            audio=audio,
            duration=duration,
            has_video=vstream is not None,
            has_audio=astream is not None,
            source_size=source_size,
        )


def _duration(container: Any, last_frame: float, rate: float, audio_seconds: float) -> float:
    if container.duration is not None and container.duration > 0:
        return float(container.duration / av.time_base)
    frame_end = last_frame + (1 / rate if rate > 0 else 0.0)
    return max(frame_end, audio_seconds)


def open_bytes(data: bytes) -> IO[bytes]:
    """A seekable file object for bytes already read (PyAV needs to seek in MP4)."""
    return io.BytesIO(data)


def encode_jpeg(rgb: npt.NDArray[np.uint8], quality: int = 3) -> bytes:
    """One RGB frame as a JPEG file, with FFmpeg's MJPEG encoder (`quality`: qscale 2..31)."""
    h, w = rgb.shape[:2]
    ctx: Any = av.CodecContext.create("mjpeg", "w")
    ctx.width, ctx.height = w, h
    ctx.pix_fmt = "yuvj420p"
    ctx.time_base = Fraction(1, 1)
    ctx.options = {"qmin": str(quality), "qmax": str(quality)}
    frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
    frame = frame.reformat(format="yuvj420p")
    frame.pts = 0
    out = b"".join(bytes(p) for p in ctx.encode(frame))
    return out + b"".join(bytes(p) for p in ctx.encode(None))
