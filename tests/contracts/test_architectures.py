"""The architecture list is the pinned vLLM's: its version is the catalog's image tag."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from contracts import architectures as va

CATALOG = Path(__file__).resolve().parents[2] / "spec" / "catalog.yaml"


def _image_tag() -> str:
    image = yaml.safe_load(CATALOG.read_text())["serving"]["vllm_image"]
    match = re.fullmatch(r"docker\.io/vllm/vllm-openai:(v[0-9][^@]*)(@sha256:[0-9a-f]{64})?", image)
    assert match, f"unexpected serving.vllm_image {image!r}"
    return match.group(1)


def test_version_is_the_catalogs_vllm_image_tag() -> None:
    assert _image_tag() == va.VLLM_VERSION, (
        "spec/catalog.yaml pins another vLLM: re-read _TEXT_GENERATION_MODELS of "
        "vllm/model_executor/models/registry.py at that tag and update vllm_architectures"
    )
    assert va.VLLM_VERSION in va.SOURCE and "2026-12-03" in va.SOURCE


def test_spec_catalog_reads_the_same_image() -> None:
    from spec.catalog import catalog

    serving = catalog().serving
    assert serving is not None
    assert serving.vllm_image.split(":")[-1].split("@")[0] == va.VLLM_VERSION


@pytest.mark.parametrize(
    "arch", ["LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM"]
)
def test_the_families_the_platform_trains_are_served(arch: str) -> None:
    assert va.supports(arch)
    assert va.unsupported_reason(arch) is None
    assert va.check([arch]) is None
    va.require([arch])


def test_a_made_up_name_is_not() -> None:
    assert not va.supports("LlamaForCausalLMButBetter")
    reason = va.unsupported_reason("LlamaForCausalLMButBetter")
    assert reason is not None and "\n" not in reason and va.VLLM_VERSION in reason
    with pytest.raises(ValueError, match="not a text-generation model"):
        va.require(["LlamaForCausalLMButBetter"])


def test_names_are_case_sensitive_and_the_reason_says_so() -> None:
    assert not va.supports("llamaforcausallm")
    assert "LlamaForCausalLM" in (va.unsupported_reason("llamaforcausallm") or "")


def test_lists_are_read_as_vllm_reads_them() -> None:
    assert va.check(["SomethingElse", "Qwen3ForCausalLM"]) is None  # first it knows wins
    assert va.check([]) is not None and va.check(None) is not None


def test_the_table_is_the_v0_34_0_one() -> None:
    # 126 keys: models added after v0.11.0 are in; those v0.34.0 serves through its
    # Transformers backend (Olmo3, Gemma) or no longer serves (Baichuan, MPT) are out.
    assert len(va.TEXT_GENERATION) == 126
    assert {"Qwen3NextForCausalLM", "GptOssForCausalLM", "AfmoeForCausalLM"} <= va.TEXT_GENERATION
    assert not {"Olmo3ForCausalLM", "GemmaForCausalLM", "BaichuanForCausalLM"} & va.TEXT_GENERATION
    assert all(name.isidentifier() for name in va.TEXT_GENERATION)


def test_written_out_sorted_one_per_line() -> None:
    source = Path(va.__file__).read_text()
    body = source.split("TEXT_GENERATION: Final[frozenset[str]] = frozenset(\n    {\n", 1)[1]
    lines = body.split("\n    }\n", 1)[0].splitlines()
    names = [line.strip().removesuffix(",").strip('"') for line in lines]
    assert names == sorted(names) and set(names) == va.TEXT_GENERATION
