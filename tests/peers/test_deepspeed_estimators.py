"""The training planner's model states per GPU against DeepSpeed's own estimators (a peer
nobody here wrote): `estimate_zero2_model_states_mem_needs` and the ZeRO-3 equivalent,
without offload, over data parallelism alone (DeepSpeed's estimators know no TP or PP)."""

from __future__ import annotations

import pytest

from spec.training_plan import Layout, Model, memory

pytestmark = pytest.mark.full_tier("DeepSpeed's memory estimators (deepspeed)")

MODELS = [
    # GPT-3 175B; a Llama-3-8B-like shape with its 128k embedding as the largest layer;
    # a 1.3B.
    Model(parameters=175e9, layers=96, hidden_size=12288, sequence_length=2048),
    Model(parameters=8.03e9, layers=32, hidden_size=4096, sequence_length=8192, vocab_size=128256),
    Model(parameters=1.3e9, layers=24, hidden_size=2048, sequence_length=2048, vocab_size=50257),
]


@pytest.mark.parametrize("model", MODELS, ids=["175b", "8b", "1.3b"])
@pytest.mark.parametrize(("per_node", "nodes"), [(8, 1), (8, 16), (8, 128)])
def test_zero_2_and_3_model_states_match_deepspeeds_estimators(
    model: Model, per_node: int, nodes: int
) -> None:
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    params = int(model.parameters)
    layout = Layout(gpus=per_node * nodes)
    _, zero2 = estimate_zero2_model_states_mem_needs(
        params, num_gpus_per_node=per_node, num_nodes=nodes, cpu_offload=False
    )
    _, zero3, _ = estimate_zero3_model_states_mem_needs(
        params,
        int(model.largest_layer()),
        num_gpus_per_node=per_node,
        num_nodes=nodes,
        cpu_offload=False,
    )
    ours2 = memory(model, layout, 2).model_states
    ours3 = memory(model, layout, 3)
    assert ours2 == pytest.approx(zero2, abs=2)
    # DeepSpeed counts ZeRO-3's bf16 weights and optimizer in its 18 bytes and leaves the
    # partitioned bf16 gradients out; the planner counts them (2 bytes per parameter / DP).
    assert ours3.model_states - ours3.gradients == pytest.approx(zero3, abs=2)
    assert ours3.gradients == pytest.approx(2 * params / layout.gpus)
