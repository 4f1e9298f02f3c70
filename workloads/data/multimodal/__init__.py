"""Multimodal preprocessing on Ray Data: video frames, speech segments, CLIP and Whisper.

`python -m workloads.data.multimodal --config FILE --input DIR_OR_S3 --output DIR` decodes
each media file with FFmpeg (PyAV), samples frames at a configured rate and size, finds speech
with Silero VAD, transcribes it with Whisper and embeds frames with CLIP, and writes per-file
arrays, `segments.jsonl` and a `manifest.json`. Stages: `pipeline`; settings: `config`;
decoding: `media`; models: `vad`, `asr`, `clip`, weights' location and digests: `models`.
"""
