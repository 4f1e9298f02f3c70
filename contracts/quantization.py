"""The quantization schemes `llmp job` accepts and the quantize job runs: each one's
llm-compressor preset and what vLLM makes of the checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal


@dataclass(frozen=True)
class Scheme:
    """One `--scheme`: its llm-compressor recipe and what vLLM v0.11.0 makes of it."""

    name: str
    preset: str
    """compressed-tensors preset scheme (`compressed_tensors.quantization.PRESET_SCHEMES`)."""
    algorithm: Literal["rtn", "gptq", "awq"]
    needs_calibration: bool
    format: str
    """`quantization_config.format` of the checkpoint (compressed-tensors CompressionFormat)."""
    vllm_scheme: str
    min_capability: int
    """vLLM's `get_min_capability()` of that scheme, e.g. 89 = compute capability 8.9."""
    group_size: int | None = None
    """Input columns per weight scale; every quantized Linear's input width must divide by it."""


SCHEMES: Final = {
    s.name: s
    for s in (
        Scheme("fp8-dynamic", "FP8_DYNAMIC", "rtn", False, "float-quantized",
               "CompressedTensorsW8A8Fp8", 89),
        Scheme("w8a8-fp8", "FP8", "rtn", True, "float-quantized",
               "CompressedTensorsW8A8Fp8", 89),
        Scheme("w4a16-gptq", "W4A16", "gptq", True, "pack-quantized",
               "CompressedTensorsWNA16", 80, group_size=128),
        Scheme("w4a16-awq", "W4A16_ASYM", "awq", True, "pack-quantized",
               "CompressedTensorsWNA16", 80, group_size=128),
    )
}  # fmt: skip
