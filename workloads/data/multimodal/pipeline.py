"""The multimodal preprocessing pipeline on Ray Data: decode, sample, detect speech, embed, write.

Stages, one row per media file all the way through (sorted by path):

1. **list**: media files under a directory or s3:// prefix (by extension; a single file may be
   given instead), read through pyarrow's filesystem layer.
2. **decode** (`Dataset.map`, a Ray task per file, `decode_cpus` each): FFmpeg via PyAV, one
   pass: frames sampled at `video.fps` by presentation time and resized; the audio track
   resampled to 16 kHz mono float32 (`media`). A file FFmpeg cannot read becomes a row marked
   failed with FFmpeg's reason: one corrupt file among thousands must not kill the job, and
   the manifest says which file and why.
3. **clip** (`map_batches` with `ClipStage`, an actor pool of `clip_actors`): CLIP image
   embeddings, L2-normalized (`clip`).
4. **vad** (`VadStage`, `vad_actors`): Silero VAD speech segments, split to Whisper's window.
5. **asr** (`AsrStage`, `asr_actors`): Whisper transcript per segment, batched (`asr`).
6. **write** (`Dataset.map`): per file, under `items/<relative path>/`: `clip.npy`
   ([frames, dim], float16 on GPU or float32 on CPU), `frame_times.npy` (seconds, float64),
   and optionally the frames (`frames/000000.jpg` or `frames.npy`). The driver then writes
   `segments.jsonl` (path, start, end, text; ordered by path and start) and, last and
   atomically, `manifest.json`.

Why actor pools: a model costs seconds to load and a GPU's memory to hold, so the model stages
are callable classes that Ray Data runs as a fixed pool of actors (`concurrency`), each loading
its model once in `__init__` and then serving batch after batch. Decoding has no state and is
a plain task per file, which Ray spreads over every CPU.

GPUs: when `compute.device` is cuda, or auto on a cluster that has GPUs, the CLIP and Whisper
actors ask Ray for `gpus_per_actor` GPUs each (`num_gpus`), so KubeRay's GPU workers host them;
inside, the actor runs fp16 if it really sees CUDA, fp32 otherwise, and the manifest records
the dtype that was used. Silero VAD is small and stays on the CPU.

Models come from a path in the config (FSx directory or s3:// prefix, see `models`); the
manifest records each path and the sha256 of its config and weights files.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import os
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import numpy.typing as npt

from contracts.multimodal_pipeline import MultimodalPipelineConfig
from workloads.data.engine import filesystem, s3_endpoint
from workloads.data.multimodal.devices import wants_gpus
from workloads.data.multimodal.media import MEDIA_EXTENSIONS, MediaError, decode
from workloads.data.multimodal.models import local_model_dir, model_digest

FORMAT = "llmp.multimodal/v1"
MANIFEST = "manifest.json"
SEGMENTS = "segments.jsonl"


class InputError(ValueError):
    """The input is unusable as a whole (nothing to process, or the one file is not media)."""


def _fs(uri: str, endpoint: str | None = None) -> tuple[Any, str]:
    """`uri`'s file system; `endpoint`: the driver's S3 endpoint, shipped with each task
    (`engine.filesystem`: a worker does not have the driver's environment)."""
    return filesystem(uri if "://" in uri else str(Path(uri).resolve()), endpoint)


def list_media(input_uri: str) -> tuple[str, list[str]]:
    """The input's root and its media files' paths relative to it, sorted."""
    from pyarrow import fs

    filesystem, root = _fs(input_uri)
    info = filesystem.get_file_info(root)
    if info.type == fs.FileType.NotFound:
        raise InputError(f"{input_uri}: no such file or directory")
    if info.type == fs.FileType.File:
        parent, name = root.rsplit("/", 1)
        _probe(filesystem, root, input_uri)
        return parent, [name]
    found = filesystem.get_file_info(fs.FileSelector(root, recursive=True))
    rel = sorted(
        str(PurePosixPath(i.path).relative_to(root))
        for i in found
        if i.type == fs.FileType.File
        and PurePosixPath(i.path).suffix.lower() in MEDIA_EXTENSIONS
        and not any(p.startswith(".") for p in PurePosixPath(i.path).relative_to(root).parts)
    )
    if not rel:
        exts = " ".join(sorted(MEDIA_EXTENSIONS))
        raise InputError(f"{input_uri}: no media files in it (extensions: {exts})")
    return root, rel


def _root(input_uri: str) -> str:
    from pyarrow import fs

    filesystem, root = _fs(input_uri)
    if filesystem.get_file_info(root).type == fs.FileType.File:
        return root.rsplit("/", 1)[0]
    return root


def _probe(filesystem: Any, path: str, shown: str) -> None:
    import av

    try:
        with filesystem.open_input_file(path) as f, av.open(f, mode="r") as c:
            if not (c.streams.video or c.streams.audio):
                raise InputError(f"{shown}: not a media file (no video or audio stream)")
    except av.FFmpegError as e:
        reason = " ".join(str(getattr(e, "strerror", None) or e).split())
        raise InputError(f"{shown}: not a media file (FFmpeg: {reason})") from None


def _ragged(items: list[Any]) -> npt.NDArray[Any]:
    arr = np.empty(len(items), dtype=object)
    arr[:] = items
    return arr


def _failed(row: dict[str, Any], stage: str, err: Exception) -> dict[str, Any]:
    reason = " ".join(str(err).split()) or type(err).__name__
    return {**row, "status": "failed", "error": f"{stage}: {reason}"[:500]}


def decode_row(
    row: dict[str, Any],
    input_uri: str,
    root: str,
    config: MultimodalPipelineConfig,
    endpoint: str | None = None,
) -> dict[str, Any]:
    """Ray task: one file to its sampled frames and 16 kHz audio (or a failed row)."""
    filesystem, _ = _fs(input_uri, endpoint)
    rel = row["path"]
    out: dict[str, Any] = {
        "path": rel,
        "status": "ok",
        "error": "",
        "duration": 0.0,
        "has_video": False,
        "has_audio": False,
        "frames": np.zeros((0, 2, 2, 3), np.uint8),
        "frame_times": np.zeros(0, np.float64),
        "audio": np.zeros(0, np.float32),
        "segments_json": "[]",
        "embeddings": np.zeros((0, 0), np.float32),
        "device": "",
    }
    try:
        with filesystem.open_input_file(f"{root}/{rel}") as f:
            media = decode(
                f,
                config.video,
                sample_rate=config.audio.sample_rate,
                want_frames=config.runs("frames"),
                want_audio=config.runs("vad"),
            )
    except (MediaError, OSError) as e:
        return _failed(out, "decode", e)
    out.update(
        duration=media.duration,
        has_video=media.has_video,
        has_audio=media.has_audio,
        frames=media.frames,
        frame_times=media.frame_times,
        audio=media.audio,
    )
    return out


class ClipStage:
    """Actor: CLIP loaded once; adds `embeddings` [frames, dim] to each file's row."""

    def __init__(self, config: MultimodalPipelineConfig, endpoint: str | None = None) -> None:
        from workloads.data.multimodal.clip import FrameEmbedder

        assert config.models.clip is not None
        self._embedder = FrameEmbedder(
            local_model_dir(config.models.clip, endpoint),
            config.compute.device,
            config.compute.clip_batch_size,
        )

    def __call__(self, batch: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
        embeddings, status, error = [], list(batch["status"]), list(batch["error"])
        for i, frames in enumerate(batch["frames"]):
            emb = np.zeros((0, self._embedder.dim), np.float32)
            if status[i] == "ok":
                try:
                    emb = self._embedder.embed(np.asarray(frames, np.uint8))
                except Exception as e:  # a bad file must not end the job: recorded, see _failed
                    failed = _failed({}, "clip", e)
                    status[i], error[i] = failed["status"], failed["error"]
            embeddings.append(emb)
        batch["embeddings"] = _ragged(embeddings)
        batch["status"], batch["error"] = np.asarray(status), np.asarray(error)
        batch["device"] = np.asarray([self._embedder.device] * len(status))
        return batch


class VadStage:
    """Actor: Silero VAD loaded once; sets `segments_json` to [[start, end], ...] seconds."""

    def __init__(self, config: MultimodalPipelineConfig) -> None:
        from workloads.data.multimodal.vad import SpeechDetector

        self._vad = SpeechDetector(config.audio)

    def __call__(self, batch: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
        segs, status, error = [], list(batch["status"]), list(batch["error"])
        for i, audio in enumerate(batch["audio"]):
            found: list[tuple[float, float]] = []
            if status[i] == "ok":
                try:
                    found = self._vad.segments(np.asarray(audio, np.float32))
                except Exception as e:  # recorded in the manifest, see ClipStage
                    failed = _failed({}, "vad", e)
                    status[i], error[i] = failed["status"], failed["error"]
            segs.append(json.dumps([[round(a, 3), round(b, 3)] for a, b in found]))
        batch["segments_json"] = np.asarray(segs, dtype=object)
        batch["status"], batch["error"] = np.asarray(status), np.asarray(error)
        return batch


class AsrStage:
    """Actor: Whisper loaded once; adds each segment's transcript to `segments_json`."""

    def __init__(self, config: MultimodalPipelineConfig, endpoint: str | None = None) -> None:
        from workloads.data.multimodal.asr import Transcriber

        assert config.models.whisper is not None
        self._sr = config.audio.sample_rate
        self._asr = Transcriber(
            local_model_dir(config.models.whisper, endpoint),
            config.models,
            config.compute.device,
            config.compute.asr_batch_size,
        )

    def __call__(self, batch: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
        out, status, error = [], list(batch["status"]), list(batch["error"])
        for i, (audio, seg_json) in enumerate(
            zip(batch["audio"], batch["segments_json"], strict=True)
        ):
            spans = json.loads(str(seg_json))
            if status[i] == "ok" and spans:
                try:
                    wave = np.asarray(audio, np.float32)
                    pieces = [wave[round(a * self._sr) : round(b * self._sr)] for a, b in spans]
                    texts = self._asr.transcribe(pieces)
                    spans = [[a, b, t] for (a, b), t in zip(spans, texts, strict=True)]
                except Exception as e:  # recorded in the manifest, see ClipStage
                    failed = _failed({}, "asr", e)
                    status[i], error[i] = failed["status"], failed["error"]
            out.append(json.dumps(spans))
        batch["segments_json"] = np.asarray(out, dtype=object)
        batch["status"], batch["error"] = np.asarray(status), np.asarray(error)
        return batch


def _npy(arr: npt.NDArray[Any]) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def write_row(
    row: dict[str, Any],
    output: str,
    config: MultimodalPipelineConfig,
    endpoint: str | None = None,
) -> dict[str, Any]:
    """Ray task: write one file's arrays; return its small summary for the manifest."""
    from workloads.data.multimodal.media import encode_jpeg

    filesystem, out_root = _fs(output, endpoint)
    rel = str(row["path"])
    frames = np.asarray(row["frames"], np.uint8)
    summary: dict[str, Any] = {
        "path": rel,
        "status": str(row["status"]),
        "error": str(row["error"]),
        "duration_s": round(float(row["duration"]), 3),
        "has_video": bool(row["has_video"]),
        "has_audio": bool(row["has_audio"]),
        "segments_json": str(row["segments_json"]),
        "device": str(row["device"]),
        "frames": len(frames) if config.runs("frames") else None,
        "frame_size": [int(frames.shape[2]), int(frames.shape[1])] if len(frames) else None,
        "outputs": {},
    }
    if summary["status"] != "ok":
        return summary
    base = f"{out_root}/items/{rel}"
    files: dict[str, bytes] = {}
    if config.runs("frames") and len(frames):
        files["frame_times.npy"] = _npy(np.asarray(row["frame_times"], np.float64))
        if config.outputs.frames == "npy":
            files["frames.npy"] = _npy(frames)
        elif config.outputs.frames == "jpeg":
            for k, f in enumerate(frames):
                files[f"frames/{k:06d}.jpg"] = encode_jpeg(f)
    if config.runs("clip") and len(frames):
        emb = np.asarray(row["embeddings"])
        files["clip.npy"] = _npy(emb)
        summary["embeddings"] = {
            "file": f"items/{rel}/clip.npy",
            "shape": list(emb.shape),
            "dtype": str(emb.dtype),
            "sha256": hashlib.sha256(files["clip.npy"]).hexdigest(),
        }
    for name, data in files.items():
        filesystem.create_dir(f"{base}/{name}".rsplit("/", 1)[0], recursive=True)
        with filesystem.open_output_stream(f"{base}/{name}") as f:
            f.write(data)
    summary["outputs"] = {k: f"items/{rel}/{k}" for k in files if not k.startswith("frames/")} | (
        {"frames": f"items/{rel}/frames/"} if config.outputs.frames == "jpeg" else {}
    )
    return summary


def build_dataset(
    config: MultimodalPipelineConfig,
    input_uri: str,
    files: list[str],
    output: str,
    gpus: bool,
) -> Any:
    """The Ray Data plan (lazy): decode -> clip -> vad -> asr -> write, one row per file."""
    import ray.data

    c = config.compute
    root = _root(input_uri)
    endpoint = s3_endpoint()  # read here, on the driver: the tasks get it as an argument
    ds: Any = ray.data.from_items([{"path": p} for p in files], override_num_blocks=len(files))
    ds = ds.map(
        decode_row,
        fn_kwargs={"input_uri": input_uri, "root": root, "config": config, "endpoint": endpoint},
        num_cpus=c.decode_cpus,
    )
    model_gpus: dict[str, Any] = {"num_gpus": c.gpus_per_actor} if gpus else {}
    common: dict[str, Any] = {"batch_size": c.files_per_batch, "batch_format": "numpy"}
    with_model = {"fn_constructor_kwargs": {"config": config, "endpoint": endpoint}}
    if config.runs("clip"):
        ds = ds.map_batches(
            ClipStage, concurrency=c.clip_actors, **model_gpus, **with_model, **common
        )
    if config.runs("vad"):
        ds = ds.map_batches(
            VadStage,
            concurrency=c.vad_actors,
            num_cpus=1,
            fn_constructor_kwargs={"config": config},
            **common,
        )
    if config.runs("asr"):
        ds = ds.map_batches(
            AsrStage, concurrency=c.asr_actors, **model_gpus, **with_model, **common
        )
    return ds.map(write_row, fn_kwargs={"output": output, "config": config, "endpoint": endpoint})


def build_manifest(
    config: MultimodalPipelineConfig,
    summaries: list[dict[str, Any]],
    models: dict[str, Any],
    ignored: int = 0,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The manifest and the segment records, both in a deterministic order."""
    per_file: list[dict[str, Any]] = []
    segments: list[dict[str, Any]] = []
    for s in sorted(summaries, key=lambda r: r["path"]):
        spans = sorted(json.loads(s.pop("segments_json")), key=lambda x: (x[0], x[1]))
        entry = {k: v for k, v in s.items() if v not in (None, "") or k == "frames"}
        if s["status"] == "ok" and config.runs("vad"):
            entry["segments"] = len(spans)
            entry["transcripts"] = sum(1 for x in spans if len(x) > 2)
            segments.extend(
                {"path": s["path"], "start": x[0], "end": x[1]}
                | ({"text": x[2]} if len(x) > 2 else {})
                for x in spans
            )
        per_file.append(entry)
    ok = [f for f in per_file if f["status"] == "ok"]
    dtypes = sorted({f["embeddings"]["dtype"] for f in ok if "embeddings" in f})
    manifest = {
        "format": FORMAT,
        "config_sha256": config.config_hash(),
        "config": config.model_dump(mode="json"),
        "stages": list(config.stages),
        "models": models,
        "outputs": {"segments": SEGMENTS, "items": "items/"},
        "files": per_file,
        "totals": {
            "files": len(per_file),
            "ok": len(ok),
            "failed": len(per_file) - len(ok),
            "ignored_not_media": ignored,
            "frames": sum(int(f.get("frames") or 0) for f in ok),
            "segments": len(segments),
            "transcripts": sum(1 for s in segments if "text" in s),
            "embedding_dtypes": dtypes,
        },
    }
    return manifest, segments


def _write_text(output: str, name: str, text: str) -> None:
    filesystem, root = _fs(output)
    if "://" not in output:
        # Local or FSx: write aside, then rename, so a reader sees the old file or the new one.
        tmp = Path(root) / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(text)
        os.replace(tmp, Path(root) / name)
        return
    with filesystem.open_output_stream(f"{root}/{name}") as f:  # an S3 PUT is atomic
        f.write(text.encode())


def run(config: MultimodalPipelineConfig, input_uri: str, output: str) -> dict[str, Any]:
    """Run the whole pipeline on a connected Ray; return the manifest it wrote."""
    import ray

    _, files = list_media(input_uri)
    ignored = _count_ignored(input_uri, len(files))
    models: dict[str, Any] = {}
    if config.runs("clip") and config.models.clip:
        models["clip"] = model_digest(config.models.clip)
    if config.runs("asr") and config.models.whisper:
        models["whisper"] = model_digest(config.models.whisper)
    if config.runs("vad"):
        models["vad"] = {"package": "silero-vad", "version": _version("silero-vad")}
    gpus = wants_gpus(config.compute.device, float(ray.cluster_resources().get("GPU", 0)))
    filesystem, out_root = _fs(output)
    filesystem.create_dir(out_root, recursive=True)
    summaries = build_dataset(config, input_uri, files, output, gpus).take_all()
    manifest, segments = build_manifest(config, [dict(s) for s in summaries], models, ignored)
    _write_text(output, SEGMENTS, "".join(json.dumps(s) + "\n" for s in segments))
    _write_text(output, MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def _count_ignored(input_uri: str, media: int) -> int:
    from pyarrow import fs

    filesystem, root = _fs(input_uri)
    if filesystem.get_file_info(root).type != fs.FileType.Directory:
        return 0
    every = filesystem.get_file_info(fs.FileSelector(root, recursive=True))
    return sum(1 for i in every if i.type == fs.FileType.File) - media


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
