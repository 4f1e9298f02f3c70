"""The architectures the pinned vLLM serves as text generators, written out from its source.

An exported model's `config.json` declares `architectures`; vLLM picks its
implementation by that name, looked up in its model registry. This module is
the registry's `_TEXT_GENERATION_MODELS` of the release pinned in
`spec/catalog.yaml` (`serving.vllm_image`), copied literally so the check
needs neither vLLM nor a network, and a test pins `VLLM_VERSION` to the
catalog's tag: bumping the image without re-reading the registry fails there.

Only the text-generation table is here. vLLM's registry has others (embedding,
cross-encoder, multimodal, speculative decoding), and with `--model-impl auto`
an architecture missing from every table may still load through its
Transformers backend. This platform serves decoder-only text generators, so
"supported" means: a native vLLM implementation, listed in this table.
"""

from __future__ import annotations

from typing import Final

VLLM_VERSION: Final = "v0.11.0"

SOURCE: Final = (
    "vllm-project/vllm, vllm/model_executor/models/registry.py, the keys of "
    "_TEXT_GENERATION_MODELS at release v0.11.0: read from the file as shipped in the "
    "PyPI wheel vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl (sha256 "
    "3861c75ff2b12e24f6d179ff5c084d791b42ded8675d76c8706697c79f68cd62; its "
    "vllm/_version.py records version 0.11.0, commit gf71952c1c, the short hash "
    "setuptools-scm wrote; registry.py sha256 "
    "66cc1cd3245239328c86af49dde46ac98bfefa3b5e52d038eb683c2d06076c25, as the wheel's "
    "RECORD lists it). The git tag itself was not read: the repository is too large to "
    "mirror here. Read 2026-12-01."
)

TEXT_GENERATION: Final[frozenset[str]] = frozenset(
    {
        "ApertusForCausalLM",
        "AquilaForCausalLM",
        "AquilaModel",
        "ArceeForCausalLM",
        "ArcticForCausalLM",
        "BaiChuanForCausalLM",
        "BaichuanForCausalLM",
        "BailingMoeForCausalLM",
        "BailingMoeV2ForCausalLM",
        "BambaForCausalLM",
        "BloomForCausalLM",
        "ChatGLMForConditionalGeneration",
        "ChatGLMModel",
        "Cohere2ForCausalLM",
        "CohereForCausalLM",
        "CwmForCausalLM",
        "DbrxForCausalLM",
        "DeciLMForCausalLM",
        "DeepseekForCausalLM",
        "DeepseekV2ForCausalLM",
        "DeepseekV32ForCausalLM",
        "DeepseekV3ForCausalLM",
        "Dots1ForCausalLM",
        "Ernie4_5ForCausalLM",
        "Ernie4_5_MoeForCausalLM",
        "Exaone4ForCausalLM",
        "ExaoneForCausalLM",
        "Fairseq2LlamaForCausalLM",
        "FalconForCausalLM",
        "FalconH1ForCausalLM",
        "FalconMambaForCausalLM",
        "GPT2LMHeadModel",
        "GPTBigCodeForCausalLM",
        "GPTJForCausalLM",
        "GPTNeoXForCausalLM",
        "Gemma2ForCausalLM",
        "Gemma3ForCausalLM",
        "Gemma3nForCausalLM",
        "GemmaForCausalLM",
        "Glm4ForCausalLM",
        "Glm4MoeForCausalLM",
        "GlmForCausalLM",
        "GptOssForCausalLM",
        "GraniteForCausalLM",
        "GraniteMoeForCausalLM",
        "GraniteMoeHybridForCausalLM",
        "GraniteMoeSharedForCausalLM",
        "GritLM",
        "Grok1ModelForCausalLM",
        "HCXVisionForCausalLM",
        "HunYuanDenseV1ForCausalLM",
        "HunYuanMoEV1ForCausalLM",
        "InternLM2ForCausalLM",
        "InternLM2VEForCausalLM",
        "InternLM3ForCausalLM",
        "InternLMForCausalLM",
        "JAISLMHeadModel",
        "JambaForCausalLM",
        "LLaMAForCausalLM",
        "Lfm2ForCausalLM",
        "Llama4ForCausalLM",
        "LlamaForCausalLM",
        "LongcatFlashForCausalLM",
        "MPTForCausalLM",
        "Mamba2ForCausalLM",
        "MambaForCausalLM",
        "MiMoForCausalLM",
        "MiniCPM3ForCausalLM",
        "MiniCPMForCausalLM",
        "MiniMaxForCausalLM",
        "MiniMaxM1ForCausalLM",
        "MiniMaxText01ForCausalLM",
        "MistralForCausalLM",
        "MixtralForCausalLM",
        "MotifForCausalLM",
        "MptForCausalLM",
        "NemotronForCausalLM",
        "NemotronHForCausalLM",
        "OPTForCausalLM",
        "Olmo2ForCausalLM",
        "Olmo3ForCausalLM",
        "OlmoForCausalLM",
        "OlmoeForCausalLM",
        "OrionForCausalLM",
        "PersimmonForCausalLM",
        "Phi3ForCausalLM",
        "PhiForCausalLM",
        "PhiMoEForCausalLM",
        "Plamo2ForCausalLM",
        "QWenLMHeadModel",
        "Qwen2ForCausalLM",
        "Qwen2MoeForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
        "Qwen3NextForCausalLM",
        "RWForCausalLM",
        "SeedOssForCausalLM",
        "SolarForCausalLM",
        "StableLMEpochForCausalLM",
        "StableLmForCausalLM",
        "Starcoder2ForCausalLM",
        "Step3TextForCausalLM",
        "TeleChat2ForCausalLM",
        "TeleFLMForCausalLM",
        "XverseForCausalLM",
        "Zamba2ForCausalLM",
    }
)
"""106 names, sorted. Aliases count: MistralForCausalLM, for one, is vLLM's Llama class."""


def supports(architecture: str) -> bool:
    """True if the pinned vLLM has a native text-generation implementation of `architecture`."""
    return architecture in TEXT_GENERATION


def unsupported_reason(architecture: str) -> str | None:
    """None if the pinned vLLM serves `architecture`; else one line saying why not."""
    if supports(architecture):
        return None
    near = [a for a in sorted(TEXT_GENERATION) if a.lower() == architecture.lower()]
    hint = f" (names are case-sensitive: {' or '.join(near)}?)" if near else ""
    return (
        f"architecture {architecture!r} is not a text-generation model of vLLM "
        f"{VLLM_VERSION}{hint}; config.json must declare one of its "
        f"{len(TEXT_GENERATION)} names, e.g. LlamaForCausalLM or Qwen3ForCausalLM "
        "(contracts.architectures.TEXT_GENERATION)"
    )


def check(architectures: list[str] | tuple[str, ...] | None) -> str | None:
    """For a config.json `architectures` list: None if vLLM would serve it, else why not.

    vLLM (`ModelRegistry.resolve_model_cls`) tries the listed names in order and
    takes the first it has, so one supported entry is enough; an empty or
    missing list is refused, as vLLM refuses it.
    """
    if not architectures:
        return (
            f"config.json declares no architectures; vLLM {VLLM_VERSION} picks the model "
            'class by that list, e.g. ["LlamaForCausalLM"]'
        )
    if any(supports(a) for a in architectures):
        return None
    return unsupported_reason(architectures[0])


def require(architectures: list[str] | tuple[str, ...] | None) -> None:
    """Raise ValueError with `check`'s one-line reason unless vLLM would serve the list."""
    reason = check(architectures)
    if reason is not None:
        raise ValueError(reason)
