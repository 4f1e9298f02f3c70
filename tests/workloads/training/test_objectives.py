"""The pieces of SFT, DPO and GRPO on their own: masks, losses, advantages, rewards, the
reference model. The trainer runs them end to end in tests/workloads/test_lifecycle.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from contracts.training import RewardConfig
from tests.workloads.hf import tiny_base_model, tiny_tokenizer
from workloads.training import records as rec
from workloads.training.objectives import (
    Reference,
    dpo_loss,
    group_advantages,
    grpo_token_loss,
    token_logps,
)
from workloads.training.rewards import answer_match, format_reward, reward_function

CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "4."},
    {"role": "user", "content": "and 3+3?"},
    {"role": "assistant", "content": "6."},
]


def _decode_labels(tok: object, labels: list[int]) -> list[str]:
    """The runs of labelled tokens, decoded."""
    runs: list[list[int]] = []
    previous = False
    for t in labels:
        if t != rec.IGNORE:
            if not previous:
                runs.append([])
            runs[-1].append(t)
        previous = t != rec.IGNORE
    return [tok.decode(r) for r in runs]  # type: ignore[attr-defined]


def test_sft_labels_are_the_assistant_turns_and_their_end() -> None:
    tok = tiny_tokenizer()
    ids, labels = rec.sft_example(tok, CHAT, 512)
    assert len(ids) == len(labels)
    assert _decode_labels(tok, labels) == ["4.<|im_end|>", "6.<|im_end|>"]


def test_a_template_without_generation_marks_gives_the_same_labels() -> None:
    marked = tiny_tokenizer()
    plain = tiny_tokenizer()
    plain.chat_template = marked.chat_template.replace("{% generation %}", "").replace(
        "{% endgeneration %}", ""
    )
    assert rec.has_generation_marks(marked) and not rec.has_generation_marks(plain)
    assert rec.sft_example(plain, CHAT, 512) == rec.sft_example(marked, CHAT, 512)


def test_a_template_that_rewrites_earlier_turns_is_refused() -> None:
    tok = tiny_tokenizer()
    # Renders the last message differently from the others: earlier renderings are then
    # not prefixes of the whole conversation.
    tok.chat_template = (
        "{% for m in messages %}{% if loop.last %}[{{ m['content'] }}]"
        "{% else %}{{ m['content'] }}{% endif %}{% endfor %}"
    )
    with pytest.raises(rec.RecordError, match="generation"):
        rec.sft_example(tok, CHAT, 512)


def test_pairs_keep_the_reply_and_drop_the_oldest_prompt_tokens() -> None:
    ids, labels = rec.pair_example(list(range(10)), [100, 101, 102], 8)
    assert ids == [5, 6, 7, 8, 9, 100, 101, 102]
    assert labels == [rec.IGNORE] * 5 + [100, 101, 102]


def test_collate_pads_right_for_training_and_left_for_generation() -> None:
    rows = [([1, 2, 3], [rec.IGNORE, 2, 3]), ([4], [4])]
    right, left = rec.collate(rows, 0), rec.collate(rows, 0, left=True)
    assert right.input_ids.tolist() == [[1, 2, 3], [4, 0, 0]]
    assert right.attention_mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert right.labels.tolist() == [[rec.IGNORE, 2, 3], [4, rec.IGNORE, rec.IGNORE]]
    assert left.input_ids.tolist() == [[1, 2, 3], [0, 0, 4]]


@pytest.mark.parametrize(
    ("line", "task", "message"),
    [
        ("{", "sft", "not JSON"),
        ('{"messages": []}', "sft", "non-empty list"),
        ('{"messages": [{"role": "user", "content": "hi"}]}', "sft", "no assistant turn"),
        ('{"messages": [{"role": "bot", "content": "hi"}]}', "sft", "needs a role"),
        ('{"prompt": "p", "chosen": "a"}', "dpo", "rejected must be a string"),
        ('{"prompt": 3}', "grpo", "prompt must be a string or messages"),
    ],
)
def test_bad_records_name_the_file_and_line(
    tmp_path: Path, line: str, task: str, message: str
) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"prompt": "ok", "chosen": "a", "rejected": "b"}\n' * (task == "dpo") + line)
    with pytest.raises(rec.RecordError, match=message) as info:
        rec.read_records(path, task)
    assert str(info.value).startswith(f"{path}:{1 + (task == 'dpo')}: ")


def test_records_are_a_seeded_stream_independent_of_world_size(tmp_path: Path) -> None:
    rows = [{"prompt": str(i)} for i in range(10)]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    stream = rec.Records(rec.read_records(tmp_path, "grpo"), seed=3)
    epoch = [stream.sample(g)["prompt"] for g in range(10)]
    assert sorted(epoch, key=int) == [str(i) for i in range(10)]  # each once per epoch
    assert stream.batch(4, 3) == [stream.sample(4), stream.sample(5), stream.sample(6)]


def test_token_logps_are_the_shifted_label_log_probabilities() -> None:
    logits = torch.randn(2, 5, 7)
    labels = torch.tensor([[rec.IGNORE, 1, 2, rec.IGNORE, 3], [rec.IGNORE] * 4 + [6]])
    logps, mask = token_logps(logits, labels)
    want = torch.log_softmax(logits, -1)
    assert mask.tolist() == [[True, True, False, True], [False, False, False, True]]
    assert math.isclose(float(logps[0, 0]), float(want[0, 0, 1]), rel_tol=1e-5)
    assert math.isclose(float(logps[1, 3]), float(want[1, 3, 6]), rel_tol=1e-5)
    assert float(logps[0, 2]) == 0.0


def test_dpo_loss_is_the_papers() -> None:
    """Rafailov et al. (2023), eq. 7: -log sigmoid(beta * (log pi/ref (chosen) - log
    pi/ref (rejected))), the `sigmoid` loss of TRL's DPOTrainer."""
    chosen, rejected = torch.tensor([-3.0, -1.0]), torch.tensor([-4.0, -0.5])
    ref_c, ref_r = torch.tensor([-3.5, -1.0]), torch.tensor([-3.5, -1.0])
    loss, rc, rr = dpo_loss(chosen, rejected, ref_c, ref_r, beta=0.1)
    margin = 0.1 * ((chosen - ref_c) - (rejected - ref_r))
    assert torch.allclose(loss, torch.log1p(torch.exp(-margin)))
    assert torch.allclose(rc - rr, margin)
    same, _, _ = dpo_loss(ref_c, ref_r, ref_c, ref_r, beta=0.1)
    assert torch.allclose(same, torch.full((2,), math.log(2)))  # policy == reference


def test_group_advantages_are_normalized_within_each_group() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 5.0, 5.0, 5.0, 5.0])
    a = group_advantages(rewards, 4)
    assert torch.allclose(a[:4].mean(), torch.tensor(0.0), atol=1e-6)
    assert a[0] > 0 > a[1]
    assert torch.all(a[4:] == 0)  # a group that all scored alike teaches nothing


def test_grpo_gradient_raises_the_logps_of_advantaged_tokens() -> None:
    logps = torch.tensor([[-1.0, -1.0], [-1.0, -1.0]], requires_grad=True)
    mask = torch.ones(2, 2, dtype=torch.bool)
    loss, kl = grpo_token_loss(logps, logps.detach(), torch.tensor([1.0, -1.0]), mask, 0.04)
    loss.backward()
    assert logps.grad is not None
    assert torch.all(logps.grad[0] < 0) and torch.all(logps.grad[1] > 0)  # descent raises row 0
    assert float(kl) == 0.0  # k3 of a policy equal to its reference


def test_lora_reference_is_the_base_with_adapters_disabled(tmp_path: Path) -> None:
    import peft
    from transformers import AutoModelForCausalLM

    base_dir = tiny_base_model(tmp_path / "base")
    policy = peft.get_peft_model(
        AutoModelForCausalLM.from_pretrained(str(base_dir)),
        peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    )
    base = AutoModelForCausalLM.from_pretrained(str(base_dir)).eval()
    tokens = torch.randint(0, 80, (2, 9), generator=torch.Generator().manual_seed(1))

    class Engine:
        module = policy

    with torch.no_grad():
        ref = Reference(None).logits(Engine(), input_ids=tokens)
        assert torch.allclose(ref, base(input_ids=tokens).logits, atol=1e-5)
        assert not torch.allclose(policy(input_ids=tokens).logits, ref, atol=1e-3)


def test_rule_rewards() -> None:
    records = [{"answer": "42"}, {"answer": "42"}, {"answer": "x"}]
    completions = ["it is 42.", "41", "  x  "]
    assert answer_match(records, completions, [True] * 3) == [1.0, 0.0, 1.0]
    assert format_reward(records, completions, [True, False, True]) == [1.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="needs an `answer`"):
        answer_match([{}], ["a"], [True])


def test_a_reward_model_scores_from_a_local_directory(tmp_path: Path) -> None:
    from transformers import AutoModelForSequenceClassification

    from tests.workloads.hf import tiny_config

    rm_dir = tmp_path / "rm"
    config = tiny_config("llama", num_labels=1)
    AutoModelForSequenceClassification.from_config(config).save_pretrained(str(rm_dir))
    tiny_tokenizer(rm_dir)
    score = reward_function(RewardConfig(model=str(rm_dir)))
    records = [{"prompt": "2+2?"}, {"prompt": [{"role": "user", "content": "hi"}]}]
    scores = score(records, ["4", "hello there"], [True, True])
    assert len(scores) == 2 and all(math.isfinite(s) for s in scores)
    assert scores == score(records, ["4", "hello there"], [True, True])  # deterministic


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"task": "sft", "model": {"pretrained": "/nonexistent/base"}}, "no config.json"),
        ({"model": {"tokenizer": "/nonexistent/tok"}}, "model.tokenizer /nonexistent/tok"),
        ({}, "data.path"),
        ({"zero_stagee": 3}, "zero_stagee: Extra inputs are not permitted"),
    ],
)
def test_the_trainer_refuses_what_it_cannot_read_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], over: dict[str, object], message: str
) -> None:
    from workloads.training import train

    cfg = {"data": {"path": str(tmp_path / "none")}, "checkpoint": {"dir": str(tmp_path)}, **over}
    (tmp_path / "job.json").write_text(json.dumps(cfg))
    assert train.main(["--config", str(tmp_path / "job.json")]) == train.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("train: ") and message in err and err.count("\n") == 1
