"""Media and models made in the test: a synthetic clip with planted speech, tiny CLIP and Whisper.

The clip is encoded with the same FFmpeg the pipeline decodes with (PyAV's wheel): H.264 video
whose frames carry a moving bar and a brightness ramp, and an AAC stereo track at 24 kHz (so
the pipeline's resample to 16 kHz mono is exercised) holding a speech-like signal in planted
intervals and near-silence elsewhere. A pure tone is not speech to Silero VAD; this signal is a
glottal pulse train (about 120 Hz, with vibrato and jitter) through three vowel formant
resonators whose vowel changes every syllable, amplitude-modulated at 4 Hz, plus breath noise.

The models are built from configs with random weights and saved with `save_pretrained`, so the
pipeline loads them from a directory exactly as it loads production weights from FSx.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

SR = 16000
VOWELS = [(700, 1200, 2500), (300, 2300, 3000), (500, 900, 2400), (400, 1900, 2600)]
WHISPER_SPECIAL = [
    "<|endoftext|>",
    "<|startoftranscript|>",
    "<|en|>",
    "<|transcribe|>",
    "<|translate|>",
    "<|notimestamps|>",
]


def _resonator(x: npt.NDArray[np.float64], freq: float, bw: float) -> npt.NDArray[np.float64]:
    r = np.exp(-np.pi * bw / SR)
    a1, a2 = -2 * r * np.cos(2 * np.pi * freq / SR), r * r
    y = np.zeros_like(x)
    y1 = y2 = 0.0
    for i, v in enumerate(x):
        yi = (1 - r) * v - a1 * y1 - a2 * y2
        y[i] = yi
        y2, y1 = y1, yi
    return y


def speech_like(seconds: float, rng: np.random.Generator, f0: float = 120.0) -> Any:
    """A voiced, syllabic signal at 16 kHz, peak 0.5."""
    n = round(seconds * SR)
    t = np.arange(n) / SR
    f = f0 * (1 + 0.1 * np.sin(2 * np.pi * 0.7 * t)) * (1 + 0.01 * rng.standard_normal(n))
    phase = np.cumsum(f / SR)
    pulses = np.zeros(n)
    pulses[np.nonzero(np.diff(np.floor(phase)) > 0)[0]] = 1.0
    src = pulses + 0.02 * rng.standard_normal(n)
    out = np.zeros(n)
    syllable = SR // 4
    for k, s in enumerate(range(0, n, syllable)):
        seg = src[s : s + syllable]
        formants = VOWELS[k % len(VOWELS)]
        out[s : s + syllable] = sum(
            _resonator(seg, fi, 80 + 40 * j) / (j + 1) for j, fi in enumerate(formants)
        )
    out *= 0.2 + 0.8 * 0.5 * (1 - np.cos(2 * np.pi * 4 * t))
    return out / (np.abs(out).max() + 1e-9) * 0.5


def soundtrack(
    seconds: float, speech: list[tuple[float, float]], seed: int = 0
) -> npt.NDArray[np.float32]:
    """`seconds` of 16 kHz audio: speech in each (start, end), faint noise elsewhere."""
    rng = np.random.default_rng(seed)
    wav = np.zeros(int(seconds * SR))
    for a, b in speech:
        i, j = round(a * SR), round(b * SR)
        wav[i:j] = speech_like((j - i) / SR, rng)
    wav += 0.003 * rng.standard_normal(wav.size)
    return wav.astype(np.float32)


def pattern_frame(i: int, width: int, height: int) -> npt.NDArray[np.uint8]:
    """Frame i: a bright vertical bar moving right over a ramp that brightens with i."""
    img = np.zeros((height, width, 3), np.uint8)
    img[..., 0] = np.linspace(0, 255, width, dtype=np.uint8)[None, :]
    img[..., 1] = (i * 5) % 256
    x = (i * 3) % width
    img[:, x : x + 6, :] = 255
    return img


def write_clip(
    path: Path,
    seconds: float,
    speech: list[tuple[float, float]],
    *,
    width: int = 96,
    height: int = 64,
    fps: int = 24,
    audio_rate: int = 24000,
    seed: int = 0,
) -> Path:
    """An MP4 (H.264 + AAC stereo) of `seconds` with speech planted in `speech` intervals."""
    import av

    wav16 = soundtrack(seconds, speech, seed)
    with av.open(str(path), mode="w") as out:
        vs: Any = out.add_stream("libx264", rate=fps)
        vs.width, vs.height, vs.pix_fmt = width, height, "yuv420p"
        a_s: Any = out.add_stream("aac", rate=audio_rate, layout="stereo")
        for i in range(int(seconds * fps)):
            frame = av.VideoFrame.from_ndarray(pattern_frame(i, width, height), format="rgb24")
            for packet in vs.encode(frame):
                out.mux(packet)
        for packet in vs.encode(None):
            out.mux(packet)
        # 16 kHz mono in, the encoder's 24 kHz stereo fltp out: FFmpeg's own resampler.
        up = av.AudioResampler(format="fltp", layout="stereo", rate=audio_rate, frame_size=1024)
        pts = 0
        for s in range(0, wav16.size, 1600):
            chunk = av.AudioFrame.from_ndarray(
                wav16[None, s : s + 1600], format="flt", layout="mono"
            )
            chunk.sample_rate, chunk.pts, chunk.time_base = SR, s, Fraction(1, SR)
            for f in up.resample(chunk):
                f.pts, pts = pts, pts + f.samples
                for packet in a_s.encode(f):
                    out.mux(packet)
        for f in up.resample(None):
            f.pts, pts = pts, pts + f.samples
            for packet in a_s.encode(f):
                out.mux(packet)
        for packet in a_s.encode(None):
            out.mux(packet)
    return path


def write_image(path: Path, width: int = 80, height: int = 60) -> Path:
    """A PNG with the pattern of frame 7, written by FFmpeg's PNG encoder."""
    import av

    with av.open(str(path), mode="w", format="image2") as out:
        s: Any = out.add_stream("png", rate=1)
        s.width, s.height, s.pix_fmt = width, height, "rgb24"
        frame = av.VideoFrame.from_ndarray(pattern_frame(7, width, height), format="rgb24")
        for packet in [*s.encode(frame), *s.encode(None)]:
            out.mux(packet)
    return path


def tiny_clip_dir(out: Path, image_size: int = 32, projection_dim: int = 16) -> Path:
    """A CLIP model directory: tiny towers, random weights, a processor for `image_size`."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    torch.manual_seed(0)
    tower = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)
    cfg = CLIPConfig(
        text_config=dict(tower, vocab_size=99, max_position_embeddings=16),
        vision_config=dict(tower, image_size=image_size, patch_size=8),
        projection_dim=projection_dim,
    )
    CLIPModel(cfg).save_pretrained(out)
    CLIPImageProcessor(
        size={"shortest_edge": image_size},
        crop_size={"height": image_size, "width": image_size},
    ).save_pretrained(out)
    return out


def tiny_whisper_tokenizer() -> Any:
    """A byte-level BPE trained here (offline) with Whisper's special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=WHISPER_SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    backend.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 10, trainer)
    eot = WHISPER_SPECIAL[0]
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=eot,
        eos_token=eot,
        pad_token=eot,
        additional_special_tokens=WHISPER_SPECIAL[1:],
    )


def tiny_whisper_dir(out: Path, max_new_tokens: int = 6) -> Path:
    """A Whisper model directory: 1+1 layers of width 32, 80 mel bins, the 30 s window."""
    import torch
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
    )

    tok = tiny_whisper_tokenizer()
    ids = {t: tok.convert_tokens_to_ids(t) for t in WHISPER_SPECIAL}
    eot = ids["<|endoftext|>"]
    cfg = WhisperConfig(
        vocab_size=len(tok),
        num_mel_bins=80,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_source_positions=1500,
        max_target_positions=64,
        pad_token_id=eot,
        bos_token_id=eot,
        eos_token_id=eot,
        decoder_start_token_id=ids["<|startoftranscript|>"],
        suppress_tokens=[],
        begin_suppress_tokens=[],
    )
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(cfg)
    gen = GenerationConfig(
        decoder_start_token_id=cfg.decoder_start_token_id,
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=eot,
        max_new_tokens=max_new_tokens,
        max_length=max_new_tokens + 4,
        lang_to_id={"<|en|>": ids["<|en|>"]},
        task_to_id={"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]},
        no_timestamps_token_id=ids["<|notimestamps|>"],
        is_multilingual=True,
        suppress_tokens=[],
        begin_suppress_tokens=[],
    )
    model.generation_config = gen
    model.save_pretrained(out)
    tok.save_pretrained(out)
    WhisperFeatureExtractor(feature_size=80, sampling_rate=SR).save_pretrained(out)
    return out
