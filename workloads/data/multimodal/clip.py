"""CLIP image embeddings of sampled frames: fp16 on CUDA, fp32 on the CPU, L2-normalized.

`FrameEmbedder` loads a `transformers` CLIPModel (or CLIPVisionModelWithProjection, whichever
the directory's config names) and its CLIPImageProcessor from a local directory, once per
actor. `get_image_features` gives the projected image embedding; dividing by its L2 norm makes
dot products cosine similarities, what retrieval and dedup downstream use. Frames go through
the model in batches of `clip_batch_size`; the result keeps the model's dtype (float16 on
CUDA, float32 on the CPU), which the manifest records.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from workloads.data.multimodal.devices import actor_device, torch_dtype


class FrameEmbedder:
    """CLIP, loaded once: `embed(frames)` maps [n, H, W, 3] uint8 to [n, projection_dim]."""

    def __init__(self, model_dir: Path, device: str, batch_size: int) -> None:
        import torch
        from transformers import CLIPImageProcessor, CLIPModel, CLIPVisionModelWithProjection

        self.device = actor_device(device)
        self.dtype = torch_dtype(self.device)
        arch = json.loads((model_dir / "config.json").read_text()).get("architectures") or []
        cls: Any = (
            CLIPVisionModelWithProjection if "CLIPVisionModelWithProjection" in arch else CLIPModel
        )
        self._vision_only = cls is CLIPVisionModelWithProjection
        self._model = cls.from_pretrained(
            str(model_dir), dtype=self.dtype, local_files_only=True
        ).to(self.device)
        self._model.eval()
        self._processor = CLIPImageProcessor.from_pretrained(str(model_dir), local_files_only=True)
        self._batch = batch_size
        self.dim = int(self._model.config.projection_dim)
        self._torch = torch

    def embed(self, frames: npt.NDArray[np.uint8]) -> npt.NDArray[Any]:
        """L2-normalized embeddings of each frame, in the model's dtype."""
        torch = self._torch
        np_dtype = np.float16 if self.dtype == torch.float16 else np.float32
        if len(frames) == 0:
            return np.zeros((0, self.dim), np_dtype)
        out: list[npt.NDArray[Any]] = []
        with torch.inference_mode():
            for i in range(0, len(frames), self._batch):
                images = list(frames[i : i + self._batch])
                pixels = self._processor(images=images, return_tensors="pt")["pixel_values"]
                pixels = pixels.to(self.device, self.dtype)
                if self._vision_only:
                    feats = self._model(pixel_values=pixels).image_embeds
                else:
                    feats = self._model.get_image_features(pixel_values=pixels)
                # transformers 5 returns a ModelOutput whose pooler_output is projected.
                if not isinstance(feats, torch.Tensor):
                    feats = feats.pooler_output
                feats = feats.float()
                feats = feats / feats.norm(dim=-1, keepdim=True).clamp_min(1e-12)
                out.append(feats.to(self.dtype).cpu().numpy())
        return np.concatenate(out).astype(np_dtype, copy=False)
