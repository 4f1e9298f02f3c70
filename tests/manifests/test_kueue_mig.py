"""MIG pools in Kueue: a pool's partitions as its flavor's resources, the tenants' GPUs as
partitions in their queues, a step and a model server that ask for one partition.

The journey: `node_pools.<p>.mig` names the partitions of every GPU (`{3g.40gb: 2}`); with
`addons.mig_strategy: mixed` the GPU operator's device plugin advertises them as
`nvidia.com/mig-3g.40gb`; the pool's flavor covers that resource, a tenant's `gpu_quota` of
8 GPUs there being 16 partitions; a `promote` job file with `partition: 3g.40gb` renders a
TrainJob asking for one, and Kueue's admission rule admits it on the pool's flavor.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from llmp.jobs import check
from llmp.jobs.checks import JobFileError
from manifests import kueue
from manifests.jobs import trainjob
from manifests.jobs.jobfile import JobFile
from manifests.queues import pool_capacities, tenant_shares
from manifests.serving import vllm
from manifests.serving.gateway import GatewayModel
from manifests.serving.multinode import plain
from program import args
from spec.platform import PlatformConfig
from spec.stackfile import load_config
from tests.conftest import config_error, merge, raw_stack

POOL = "eval"
MIG = {"3g.40gb": 2}
RUNTIMES = trainjob.cluster_training_runtimes()


def mig_raw(stack: str = "pretrain", layout: dict[str, int] | None = None, **pool: Any) -> dict:
    """`stack` with a 2-node p5 pool `eval` partitioned by `layout`, 8 of its GPUs the first
    tenant's."""
    raw = raw_stack(stack)
    tenant = next(iter(raw["llm-platform:tenants"]))
    return merge(
        raw,
        {
            "llm-platform:node_pools": {
                POOL: {
                    "instance_type": "p5.48xlarge",
                    "min_size": 2,
                    "desired_size": 2,
                    "max_size": 2,
                    "mig": layout or MIG,
                    **pool,
                }
            },
            "llm-platform:tenants": {tenant: {"gpu_quota": {POOL: 8}}},
        },
    )


def mig_stack(**kw: Any) -> PlatformConfig:
    return load_config(mig_raw(**kw))


def promote_file(**overrides: Any) -> JobFile:
    return JobFile.model_validate(
        {
            "kind": "promote",
            "name": "llama-promote",
            "stack": "pretrain",
            "tenant": "foundation",
            "pool": POOL,
            "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:v1",
            "checkpoint": "/fsx/checkpoints/llama-pretrain",
            "promote": {"from_job": "llama-pretrain", "name": "llama-8b", "bucket": "models"},
            "partition": "3g.40gb",
            **overrides,
        }
    )


def test_a_mig_pools_flavor_offers_its_partitions_and_the_tenants_gpus_as_partitions() -> None:
    cfg = mig_stack()
    (pool,) = [p for p in pool_capacities(cfg) if p.name == POOL]
    assert pool.partitions == {"nvidia.com/mig-3g.40gb": 2}
    assert pool.gpus == 16  # 2 nodes x 8 GPUs
    _, queues = kueue.platform_queues(pool_capacities(cfg), tenant_shares(cfg))
    tenant = next(q for q in queues if q.metadata.name == "foundation").manifest()
    (group,) = tenant["spec"]["resourceGroups"]
    assert "nvidia.com/mig-3g.40gb" in group["coveredResources"]
    (eval_flavor,) = [f for f in group["flavors"] if f["name"] == f"pool-{POOL}"]
    quota = {r["name"]: r["nominalQuota"] for r in eval_flavor["resources"]}
    # 8 GPUs: 16 partitions, with 8 GPUs' share of the host (p5: 24 vCPUs, 256 GiB each).
    assert quota == {
        "cpu": "192",
        "memory": "2048Gi",
        "nvidia.com/gpu": "0",
        "nvidia.com/mig-3g.40gb": "16",
    }
    spare = next(q for q in queues if q.metadata.name == "spare").manifest()
    (spare_eval,) = [
        f for f in spare["spec"]["resourceGroups"][0]["flavors"] if "eval" in f["name"]
    ]
    assert {r["name"]: r["nominalQuota"] for r in spare_eval["resources"]}[
        "nvidia.com/mig-3g.40gb"
    ] == "16"  # the other 8 GPUs
    print(
        f"\nMIG pool {POOL}: 2 x p5.48xlarge, {MIG} per GPU -> nvidia.com/mig-3g.40gb "
        f"{16} per node; queue foundation: {quota}"
    )


def test_a_step_on_a_partition_is_admitted_on_the_mig_pool() -> None:
    cfg = mig_stack()
    prepared = check("promote.yaml", promote_file(), cfg)
    body = prepared.manifests[-1]
    (pod_set,) = kueue.pod_sets(body, RUNTIMES)
    requests = pod_set.requests()
    assert requests["nvidia.com/mig-3g.40gb"] == 1
    assert "nvidia.com/gpu" not in requests
    # A partition's host share: half of one GPU's (2 partitions per GPU), 85% of it.
    assert requests["cpu"] == 10 and requests["memory"] == kueue.quantity("108Gi")
    result = prepared.admission
    assert result.state == kueue.ADMITTED, result.problems
    assert result.flavors["node"]["nvidia.com/mig-3g.40gb"] == f"pool-{POOL}"
    print(f"\nMIG: {result.state}: node x 1 nvidia.com/mig-3g.40gb on {result.flavors['node']}")
    summary = prepared.summary()
    assert "  pool eval: p5.48xlarge, 1 3g.40gb MIG partition with 10 vCPUs, 108Gi" in summary
    assert "  queue foundation/default -> ClusterQueue foundation, flavor pool-eval" in summary
    assert "  Kueue admits 1 nvidia.com/mig-3g.40gb (1 nominal)" in summary
    # All 16 partitions of the tenant's 8 GPUs, and the cohort lends the rest; 33 wait.
    pools = pool_capacities(cfg)
    flavors, queues = kueue.platform_queues(pools, tenant_shares(cfg))
    queue = next(q for q in queues if q.metadata.name == "foundation")
    many = kueue.PodSet(name="node", count=32, template=pod_set.template)
    assert kueue.admit([many], queue, flavors, cohort=queues).admitted
    too_many = kueue.PodSet(name="node", count=33, template=pod_set.template)
    refused = kueue.admit([too_many], queue, flavors, cohort=queues)
    assert "nvidia.com/mig-3g.40gb 33 > 32" in refused.problems[0]


def test_training_on_a_mig_pool_and_a_partition_elsewhere_are_refused_in_one_line() -> None:
    cfg = mig_stack()
    with pytest.raises(JobFileError) as info:
        check("promote.yaml", promote_file(partition=None), cfg)
    assert str(info.value) == (
        "job file promote.yaml: pool = 'eval': pool eval is partitioned by MIG (3g.40gb per "
        "GPU): a step asks for one of them (`partition`); training takes whole GPUs on "
        "another pool"
    )
    with pytest.raises(JobFileError, match="pool h100 has no MIG partitions"):
        check("promote.yaml", promote_file(pool="h100"), cfg)
    with pytest.raises(ValueError, match="kind pretrain takes no partition"):
        JobFile.model_validate(
            {
                "kind": "pretrain",
                "name": "x",
                "stack": "pretrain",
                "tenant": "foundation",
                "pool": POOL,
                "nodes": 1,
                "image": "r.example.com/t:1",
                "data": "/fsx/d",
                "checkpoint": "/fsx/c",
                "partition": "3g.40gb",
            }
        )


@pytest.mark.parametrize(
    ("pool", "layout", "expected"),
    [
        ("p5.48xlarge", {"3g.20gb": 2}, "mig.3g.20gb = 2: not a MIG profile of the H100; one of"),
        ("p5.48xlarge", {"3g.40gb": 3}, "a H100 holds at most 2 of 3g.40gb"),
        (
            "p5.48xlarge",
            {"4g.40gb": 1, "3g.40gb": 1, "1g.10gb": 1},
            "takes 8 of a H100's 7 compute slices and 9 of its 8 memory slices",
        ),
        ("g6e.12xlarge", {"1g.10gb": 7}, "the L40S GPUs of g6e.12xlarge have no MIG partitions"),
    ],
)
def test_a_layout_the_gpu_cannot_hold_is_refused_in_one_line(
    pool: str, layout: dict[str, int], expected: str
) -> None:
    message = config_error(mig_raw(layout=layout, instance_type=pool))
    assert expected in message and "node_pools.eval.mig" in message


def test_the_single_strategy_takes_one_profile_per_pool() -> None:
    raw = merge(
        mig_raw(layout={"3g.40gb": 1, "1g.10gb": 3}),
        {"llm-platform:addons": {"mig_strategy": "single"}},
    )
    assert "one profile per pool, or mig_strategy mixed" in config_error(raw)
    single = load_config(
        merge(mig_raw(layout={"1g.10gb": 7}), {"llm-platform:addons": {"mig_strategy": "single"}})
    )
    (pool,) = [p for p in pool_capacities(single) if p.name == POOL]
    # Every partition is an nvidia.com/gpu of the pool's own flavor: 7 per GPU.
    assert pool.partitions == {"nvidia.com/gpu": 7} and pool.per_gpu == {"nvidia.com/gpu": 7}


# --- serving on a partition ----------------------------------------------------------------


def serving_raw() -> dict[str, Any]:
    """inference with a p5en pool `eval` of two 3g.71gb per GPU and a small model on them."""
    raw = raw_stack("inference")
    raw = merge(
        raw,
        {
            "llm-platform:node_pools": {
                POOL: {
                    "instance_type": "p5en.48xlarge",
                    "min_size": 1,
                    "desired_size": 1,
                    "max_size": 1,
                    "mig": {"3g.71gb": 2},
                }
            },
            "llm-platform:tenants": {"serving": {"serving_gpus": {POOL: 8}}},
        },
    )
    models = raw["llm-platform:serving"]["models"]
    small = copy.deepcopy(next(m for m in models if m["name"] == "llama-8b"))
    small.update(
        name="eval-8b", node_pool=POOL, mig_profile="3g.71gb", max_replicas=16, min_replicas=1
    )
    small.pop("routing", None)
    models.append(small)
    return raw


def test_a_model_server_on_a_partition_asks_for_one_and_the_serving_queue_admits_16() -> None:
    cfg = load_config(serving_raw())
    assert cfg.serving is not None
    model = next(m for m in cfg.serving.models if m.name == "eval-8b")
    (resource, per_gpu) = args.serving_partitions(cfg, cfg.serving)["eval-8b"]
    assert (resource, per_gpu) == ("nvidia.com/mig-3g.71gb", 2)
    engine = args.serving_engines(cfg, cfg.serving)["eval-8b"]
    deployment = vllm.deployment_args(
        "serving",
        model,
        engine,
        "p5en.48xlarge",
        resource,
        "nvidia.com/gpu",
        gateway_model=GatewayModel(name="eval-8b", max_requests=40, clients=("app",)),
        partitions_per_gpu=per_gpu,
    )
    manifest = {
        "kind": "Deployment",
        "spec": {"template": plain(deployment.spec.template)},  # type: ignore[union-attr]
    }
    (pod,) = kueue.pod_sets(manifest)
    requests = pod.requests(kueue.EXCLUDED_RESOURCE_PREFIXES)
    assert requests[resource] == 1 and "nvidia.com/gpu" not in requests
    flavors, queues = kueue.platform_queues(pool_capacities(cfg), tenant_shares(cfg))
    serving = next(q for q in queues if q.metadata.name == "serving")
    fits = kueue.PodSet(name="main", count=16, template=pod.template)
    assert kueue.admit([fits], serving, flavors, cohort=queues).admitted
    over = kueue.PodSet(name="main", count=17, template=pod.template)
    assert not kueue.admit([over], serving, flavors, cohort=queues).admitted


def test_a_model_on_a_mig_pool_must_name_a_partition_it_has() -> None:
    raw = serving_raw()
    model = raw["llm-platform:serving"]["models"][-1]
    model["mig_profile"] = "7g.141gb"
    assert "not a partition of pool eval (its layout has 3g.71gb)" in config_error(raw)
    del model["mig_profile"]
    assert "pool eval is partitioned by MIG: a replica runs on one partition" in config_error(raw)


def test_the_memory_check_takes_the_partitions_memory_not_the_gpus() -> None:
    """What fits on a partition: llama-8b on a 3g.71gb of an H200 (71 GB, 66.1 GiB), the KV
    cache of its sequences in what the weights leave; 16 sequences at 16384 tokens no longer
    fit on a 1g.18gb."""
    from spec.errors import FieldError
    from spec.serving import engine_plan

    cfg = load_config(serving_raw())
    assert cfg.serving is not None
    model = next(m for m in cfg.serving.models if m.name == "eval-8b")
    plan = engine_plan(model, "p5en.48xlarge")
    whole = engine_plan(model.model_copy(update={"mig_profile": None}), "p5en.48xlarge")
    assert plan.gpu_memory_gib == pytest.approx(71e9 / 2**30)
    assert plan.budget_gib < whole.budget_gib and plan.max_num_seqs <= whole.max_num_seqs
    print(
        f"\nMIG memory: {model.name} on a {model.mig_profile}: {plan.need_gib} of "
        f"{plan.budget_gib} GiB, {plan.max_num_seqs} seqs at {plan.max_model_len} tokens "
        f"(a whole H200: {whole.max_num_seqs} seqs)"
    )
    small = model.model_copy(update={"mig_profile": "1g.18gb"})
    tight = small.model_copy(
        update={"engine": small.engine.model_copy(update={"max_num_seqs": 16})}
    )
    with pytest.raises(FieldError) as info:
        engine_plan(tight, "p5en.48xlarge")
    assert "of a H200 1g.18gb partition on p5en.48xlarge" in str(info.value)
    assert "or take a larger partition (mig_profile)" in str(info.value)
    print(f"MIG memory: {info.value}")
