"""The training planner's arithmetic against published runs: GPT-3's compute, the seeds'
175B in 72 hours, Llama 3 405B on 16k H100s, and the serving check's weights."""

from __future__ import annotations

import pytest

from spec.serving_memory import GIB, ModelShape, memory_need
from spec.training_plan import (
    Layout,
    Model,
    PlanError,
    TrainingPlan,
    check_layout,
    gpus_for_hours,
    memory,
)

GPT3 = Model(parameters=175e9, layers=96, hidden_size=12288, sequence_length=2048)
LLAMA3_405B_SHAPE = ModelShape(
    hidden_size=16384,
    layers=126,
    heads=128,
    kv_heads=8,
    head_dim=128,
    intermediate_size=53248,
    vocab_size=128256,
)
LLAMA3_405B = Model(
    parameters=LLAMA3_405B_SHAPE.dense_parameters(),
    layers=126,
    hidden_size=16384,
    sequence_length=8192,
    vocab_size=128256,
    shape=LLAMA3_405B_SHAPE,
)


def test_gpt3_175b_on_300b_tokens_is_3_14e23_flops() -> None:
    """Brown et al. 2020, table D.1: 3.14e23 FLOPs for GPT-3 175B (N = 174.6B there)."""
    assert GPT3.flops(300e9) == pytest.approx(3.14e23, rel=0.005)


def test_175b_in_72_hours_at_120_tflops_takes_about_10k_h100s() -> None:
    """The seeds' target: 3.15e23 / (120e12 x 72 x 3600) = 10,127 GPUs, 1,266 p5 nodes."""
    gpus = gpus_for_hours(GPT3, 300e9, 72, 120, per_node=8)
    assert gpus == 10_128
    plan = TrainingPlan(GPT3, 300e9, "p5.48xlarge", Layout(gpus=gpus), achieved_tflops=120)
    assert plan.nodes == 1_266 and plan.hours <= 72
    assert plan.hours == pytest.approx(72, rel=0.001)
    # 120 TFLOPS is 12% of an H100's dense BF16 peak: far below what large runs achieve.
    assert 120 / plan.peak_tflops == pytest.approx(0.121, abs=0.001)
    # Whole model replicas too: TP 8 x PP 8 rounds up to 64-GPU steps.
    assert gpus_for_hours(GPT3, 300e9, 72, 120, per_node=8, model_parallel=64) == 10_176


def test_llama3_405b_on_16k_h100_at_38_to_43_percent_mfu() -> None:
    """Llama 3 paper (Dubey et al. 2024): 405B parameters on 15.6T tokens, 3.8e25 FLOPs, on
    up to 16,384 H100s at 38-43% MFU. The full shape counts 405.9B parameters."""
    assert LLAMA3_405B.parameters == pytest.approx(405.9e9, rel=0.001)
    assert LLAMA3_405B.flops(15.6e12) == pytest.approx(3.8e25, rel=0.01)
    days = []
    for mfu in (0.38, 0.43):
        plan = TrainingPlan(
            LLAMA3_405B,
            15.6e12,
            "p5.48xlarge",
            Layout(gpus=16_384, tensor_parallel=8, pipeline_parallel=16),
            achieved_tflops=mfu * 989,
        )
        days.append(plan.hours / 24)
    # About two months of pure compute on the whole fleet: 72 days at 38%, 64 at 43%.
    assert days[0] == pytest.approx(71.4, abs=0.5) and days[1] == pytest.approx(63.1, abs=0.5)


def test_weights_per_gpu_of_the_heaviest_stage_are_the_serving_checks() -> None:
    """The serving-405b example: TP 8 within a node, PP 2 across two (the same arithmetic as
    spec.serving_memory, which the planner reuses for a full shape)."""
    layout = Layout(gpus=16, tensor_parallel=8, pipeline_parallel=2)
    served = memory_need(LLAMA3_405B_SHAPE, tensor_parallel=8, pipeline_parallel=2)
    assert memory(LLAMA3_405B, layout, 0).weights == pytest.approx(served.weights)
    assert served.weights / GIB == pytest.approx(47.2, abs=0.05)


def test_zero_stages_partition_states_over_data_parallel_replicas() -> None:
    """Phi = 175e9 / (TP 8 x PP 8); DP 16: stage 0 holds 20 Phi, stage 1 4 Phi + 16 Phi/DP,
    stage 2 2 Phi + 18 Phi/DP, stage 3 18 Phi/DP plus the largest layer (12 h^2) x 4 / TP."""
    layout = Layout(gpus=1024, tensor_parallel=8, pipeline_parallel=8)
    phi = 175e9 / 64
    states = [memory(GPT3, layout, z).model_states for z in (0, 1, 2, 3)]
    assert states[0] == pytest.approx(20 * phi)
    assert states[1] == pytest.approx(4 * phi + 16 * phi / 16)
    assert states[2] == pytest.approx(2 * phi + 18 * phi / 16)
    assert states[3] == pytest.approx(20 * phi / 16 + 4 * 12 * 12288**2 / 8)
    assert states == sorted(states, reverse=True)


def test_activations_follow_flashattention_and_shrink_17x_when_checkpointed() -> None:
    """34 s b h L / t bytes (Korthikanti et al. 2022, no attention scores), 2 s b h L / t with
    full recomputation."""
    plain = memory(GPT3, Layout(gpus=64, tensor_parallel=8, pipeline_parallel=8), 3)
    assert plain.activations == 34 * 2048 * 12288 * 96 / 8
    kept = memory(
        GPT3,
        Layout(gpus=64, tensor_parallel=8, pipeline_parallel=8, activation_checkpointing=True),
        3,
    )
    assert plain.activations / kept.activations == 17


def test_the_checkpoint_is_14_bytes_per_parameter() -> None:
    plan = TrainingPlan(GPT3, 300e9, "p5.48xlarge", Layout(gpus=8), achieved_tflops=400)
    assert plan.checkpoint_bytes == 14 * 175e9
    assert plan.tokens_per_second_per_gpu == pytest.approx(400e12 / (6 * 175e9))


def test_cost_is_whole_nodes_at_the_catalogs_price() -> None:
    plan = TrainingPlan(GPT3, 300e9, "p5.48xlarge", Layout(gpus=12), achieved_tflops=400)
    assert plan.nodes == 2
    assert plan.cost() == pytest.approx(2 * 55.04 * plan.hours)
    assert plan.cost("CAPACITY_BLOCK") == pytest.approx(2 * 31.464 * plan.hours)


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        (Layout(gpus=100, tensor_parallel=8), "--gpus 100 is not a multiple of TP x PP = 8"),
        (Layout(gpus=16, tensor_parallel=16), "--tp 16 spans more than a node's 8 GPUs"),
        (Layout(gpus=128, pipeline_parallel=128), "--pp 128 exceeds the model's 96 layers"),
    ],
)
def test_a_layout_that_cannot_run_is_one_line(layout: Layout, message: str) -> None:
    with pytest.raises(PlanError) as info:
        check_layout(layout, GPT3, 8)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_gpus_for_hours_rounds_up_to_whole_nodes() -> None:
    gpus = gpus_for_hours(GPT3, 300e9, 72, 120, per_node=8)
    assert gpus % 8 == 0
    assert (gpus - 8) * 120e12 * 72 * 3600 < GPT3.flops(300e9) <= gpus * 120e12 * 72 * 3600
