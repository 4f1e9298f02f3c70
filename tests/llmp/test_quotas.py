"""The EC2 vCPU quotas a stack needs (`llmp.plan.quotas`), as `llmp synth` prints them: one
line per quota, the vCPUs of its pools at max size, capacity blocks apart, and nothing for
the system pool of a cluster the stack adopts."""

from __future__ import annotations

from typer.testing import CliRunner

from llmp.cli import app
from llmp.plan.quotas import quota_demands, quota_lines
from llmp.stacks import REPO_ROOT, load_stack
from spec.stackfile import load_config, load_stack_file

EXAMPLES = REPO_ROOT / "examples" / "stacks"


def test_the_pretrain_stack_needs_its_on_demand_pools_at_max_size() -> None:
    assert quota_lines(load_stack("pretrain")) == [
        "quota L-417A185B P On-Demand: 3,072 vCPUs (16 x p5.48xlarge)",
        "quota L-1216C47A Standard On-Demand: 224 vCPUs (14 x m7i.4xlarge)",
        "no vCPU quota: h100-block (capacity block: the block is the capacity)",
    ]


def test_forty_p5_nodes_are_7680_vcpus_and_spot_is_its_own_quota() -> None:
    raw = load_stack_file(str(REPO_ROOT / "stacks" / "Pulumi.pretrain.yaml"))
    pool = raw["llm-platform:node_pools"]["h100"]
    pool.update(max_size=40, desired_size=16, min_size=16)
    spot = dict(pool, capacity_type="SPOT", checkpointing=True, max_size=8)
    spot.update(min_size=0, desired_size=0)
    raw["llm-platform:node_pools"]["h100-spot"] = spot
    demands, blocks = quota_demands(load_config(raw))
    by_code = {d.code: d for d in demands}
    assert by_code["L-417A185B"].vcpus == 7680
    assert (by_code["L-7212CCBC"].market, by_code["L-7212CCBC"].vcpus) == ("Spot", 1536)
    assert blocks == ["h100-block"]


def test_an_adopted_clusters_system_pool_is_not_the_stacks_to_count() -> None:
    team = load_stack("team", EXAMPLES / "Pulumi.team.yaml")
    assert team.adopts_cluster
    assert quota_lines(team) == ["quota L-417A185B P On-Demand: 384 vCPUs (2 x p5.48xlarge)"]


def test_synth_prints_the_quota_lines_within_80_columns(tmp_path) -> None:
    result = CliRunner().invoke(app, ["synth", "finetune", "--out", str(tmp_path), "--no-policy"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if line.startswith("quota ")]
    assert lines == [
        "quota L-417A185B P On-Demand: 384 vCPUs (2 x p5.48xlarge)",
        "quota L-7212CCBC P Spot: 384 vCPUs (4 x p4de.24xlarge)",
        "quota L-1216C47A Standard On-Demand: 64 vCPUs (4 x m7i.4xlarge)",
    ]
    assert all(len(line) <= 80 for line in lines)


def test_llmp_dr_leaves_an_adopted_clusters_system_pool_out_too() -> None:
    from llmp.dr.rto import quota_needs

    team = load_stack("team", EXAMPLES / "Pulumi.team.yaml")
    needs, unquoted = quota_needs(team)
    assert [(n.code, n.vcpus) for n in needs] == [("L-417A185B", 384)]
    assert all("system pool" not in n.pools for n in needs) and unquoted == []
