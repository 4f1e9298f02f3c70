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

VLLM_VERSION: Final = "v0.34.0"

SOURCE: Final = (
    "vllm-project/vllm, vllm/model_executor/models/registry.py, the keys of "
    "_TEXT_GENERATION_MODELS at release v0.34.0: read from the file as shipped in the "
    "PyPI sdist vllm-0.34.0.tar.gz (sha256 "
    "fcad848b246a9d8652b47e6425af92334dc02492f9802720f54e27b823cf0113, uploaded "
    "2026-11-16; its vllm/_version.py records version 0.34.0, commit g62d4bc3c7, the short "
    "hash its build wrote; registry.py sha256 "
    "20cbb707bc35751fc9cf98ee950c898fe4cf10324afb6749c9ef2de70ed672f9). Since v0.11.0 some "
    "names left the table: to _TRANSFORMERS_SUPPORTED_MODELS (served through the "
    "Transformers backend, e.g. GemmaForCausalLM, Olmo2ForCausalLM, Starcoder2ForCausalLM) "
    "or to _PREVIOUSLY_SUPPORTED_MODELS (removed, e.g. BaichuanForCausalLM, MPTForCausalLM). "
    "The git tag itself was not read: the repository is too large to mirror here. Read "
    "2026-12-03."
)

TEXT_GENERATION: Final[frozenset[str]] = frozenset(
    {
        "AXK1ForCausalLM",
        "AfmoeForCausalLM",
        "AliceAIForCausalLM",
        "ApertusForCausalLM",
        "BailingMoeForCausalLM",
        "BailingMoeV2ForCausalLM",
        "BailingMoeV2_5ForCausalLM",
        "BailingMoeV3ForCausalLM",
        "BeamForCausalLM",
        "BloomForCausalLM",
        "ChatGLMForConditionalGeneration",
        "ChatGLMModel",
        "Cohere2ForCausalLM",
        "Cohere2MoeForCausalLM",
        "CohereForCausalLM",
        "DbrxForCausalLM",
        "DeciLMForCausalLM",
        "DeepseekForCausalLM",
        "DeepseekV2ForCausalLM",
        "DeepseekV32ForCausalLM",
        "DeepseekV3ForCausalLM",
        "DeepseekV4ForCausalLM",
        "DomynEdgeForCausalLM",
        "DoryForCausalLM",
        "Ernie4_5ForCausalLM",
        "Ernie4_5_MoeForCausalLM",
        "Exaone4ForCausalLM",
        "ExaoneForCausalLM",
        "ExaoneMoEForCausalLM",
        "ExaoneMoeForCausalLM",
        "FalconForCausalLM",
        "FalconH1ForCausalLM",
        "FalconMambaForCausalLM",
        "FlintForCausalLM",
        "GPT2LMHeadModel",
        "GPTJForCausalLM",
        "Gemma2ForCausalLM",
        "Gemma3ForCausalLM",
        "Gemma3nForCausalLM",
        "Gemma4ForCausalLM",
        "Glm4ForCausalLM",
        "Glm4MoeForCausalLM",
        "Glm4MoeLiteForCausalLM",
        "Glm5NextForCausalLM",
        "GlmMoeDsaForCausalLM",
        "GptOssForCausalLM",
        "GraniteForCausalLM",
        "GraniteMoeForCausalLM",
        "GraniteMoeHybridForCausalLM",
        "GraniteMoeSWAForCausalLM",
        "GraniteMoeSharedForCausalLM",
        "GraniteSWAForCausalLM",
        "HCXVisionV2ForCausalLM",
        "HYV3ForCausalLM",
        "HYV4ForCausalLM",
        "HrmTextForCausalLM",
        "HyperCLOVAXForCausalLM",
        "IQuestCoderForCausalLM",
        "IQuestLoopCoderForCausalLM",
        "InklingForCausalLM",
        "InklingForConditionalGeneration",
        "InternLM2ForCausalLM",
        "InternLM3ForCausalLM",
        "JambaForCausalLM",
        "K2HorizonForCausalLM",
        "KimiLinearForCausalLM",
        "LLaMAForCausalLM",
        "LagunaForCausalLM",
        "Lfm2ForCausalLM",
        "Lfm2MoeForCausalLM",
        "Lfm3ForCausalLM",
        "Llama4ForCausalLM",
        "LlamaForCausalLM",
        "LongcatFlashForCausalLM",
        "LongcatFlashNgramForCausalLM",
        "Mamba2ForCausalLM",
        "MambaForCausalLM",
        "MiMoForCausalLM",
        "MiMoV2FlashForCausalLM",
        "MiMoV2ForCausalLM",
        "MiniCPM3ForCausalLM",
        "MiniCPMForCausalLM",
        "MiniMaxM2ForCausalLM",
        "MiniMaxM3SparseForCausalLM",
        "Ministral3ForCausalLM",
        "MistralForCausalLM",
        "MistralLarge3ForCausalLM",
        "MistralLarge4ForCausalLM",
        "MixtralForCausalLM",
        "MuseGlimmerForCausalLM",
        "NemotronForCausalLM",
        "NemotronHForCausalLM",
        "NemotronHPuzzleForCausalLM",
        "OPTForCausalLM",
        "OlmoHybridForCausalLM",
        "OrionForCausalLM",
        "PanguEmbeddedForCausalLM",
        "PanguProMoEV2ForCausalLM",
        "PanguUltraMoEForCausalLM",
        "Param2MoEForCausalLM",
        "Phi3ForCausalLM",
        "PhiMoEForCausalLM",
        "Plamo3ForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen2MoeForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
        "Qwen3NextForCausalLM",
        "Qwen3_5ForCausalLM",
        "Qwen3_5MoeForCausalLM",
        "Qwen4ExpForCausalLM",
        "RicursiveForCausalLM",
        "Rnj1ForCausalLM",
        "SarvamMLAForCausalLM",
        "SarvamMoEForCausalLM",
        "SolarForCausalLM",
        "Step1ForCausalLM",
        "Step3TextForCausalLM",
        "Step3p5ForCausalLM",
        "Step5ForCausalLM",
        "TeleChat2ForCausalLM",
        "TeleChat3ForCausalLM",
        "TeleFLMForCausalLM",
        "UnlimitedOCR2TextForCausalLM",
        "Zamba2ForCausalLM",
        "ZayaForCausalLM",
    }
)


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
