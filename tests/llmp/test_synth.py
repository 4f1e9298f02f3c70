"""`llmp synth`: the plan file, the manifests, secrets, the console output, exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from llmp.plan.synth import SECRET, SynthError, engine_config, run_program, synthesize, write_plan
from llmp.stacks import REPO_ROOT
from spec.catalog import catalog
from spec.tenancy import TRAINING_PRIORITIES
from tests.conftest import STACKS, merge, raw_stack


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llmp.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


@pytest.mark.parametrize("stack", STACKS)
def test_plan_has_the_documented_shape(plans, stack: str) -> None:
    plan = plans(stack).to_dict()
    assert plan["project"] == "llm-platform"
    assert plan["stack"] == stack
    urns = {r["urn"] for r in plan["resources"]}
    assert len(urns) == len(plan["resources"])
    required = {"urn", "type", "name", "parent", "custom", "provider", "inputs", "dependencies"}
    # Lifecycle options are recorded only where set (precious buckets retain on delete).
    optional = {"protect", "retain_on_delete", "import_id", "delete_before_replace"}
    optional |= {"ignore_changes", "replace_on_changes", "aliases", "depends_on"}
    for r in plan["resources"]:
        assert required <= set(r) <= required | optional
        assert r["parent"] is None or r["parent"] in urns
        assert set(r["dependencies"]) <= urns
        # depends_on: the dependencies no input takes an output of
        assert set(r.get("depends_on", [])) <= set(r["dependencies"])
    # Every child is parented to a component; only providers and components sit at the top.
    for r in plan["resources"]:
        if r["parent"] is None:
            assert r["type"].startswith(("pulumi:providers:", "llmp:")), r["urn"]


@pytest.mark.parametrize("stack", STACKS)
def test_children_are_named_after_their_component(plans, stack: str) -> None:
    plan = plans(stack)
    for r in plan.resources:
        if r.parent:
            component = r.parent.rsplit("::", 1)[1]
            assert r.name.startswith(f"{component}-"), r.urn


def test_every_aws_resource_uses_the_explicit_tagged_provider(plans) -> None:
    plan = plans("pretrain")
    provider = plan.one("pulumi:providers:aws", "aws")
    assert provider.inputs["region"] == "us-east-1"
    tags = json.loads(provider.inputs["defaultTags"])["tags"]
    assert tags["team"] == "foundation-models"
    assert tags["cost-center"] == "cc-4100"
    assert tags["stack"] == "pretrain"
    dr = plan.one("pulumi:providers:aws", "aws-dr")
    assert dr.inputs["region"] == "us-west-2"
    for r in plan.resources:
        if r.type.startswith("aws:"):
            in_dr = re.search(r"-replica(-|$)", r.name) is not None
            expected = dr if in_dr else provider
            assert r.provider == expected.urn, r.urn


def test_secret_config_and_secret_outputs_never_reach_the_plan(tmp_path) -> None:
    password = "llm-platform-monitoring:grafanaAdminPassword"
    raw = merge(raw_stack("pretrain"), {password: {"secure": "v1:c2VjcmV0LXZhbHVl"}})
    config, secret_keys = engine_config(raw)
    assert config[password] == SECRET
    assert secret_keys == [password]
    plan = synthesize("pretrain", raw)
    assert plan.outputs["kubeconfig"] == SECRET
    text = (write_plan(plan, tmp_path) / "plan.json").read_text()
    assert "v1:c2VjcmV0LXZhbHVl" not in text
    assert json.loads(text)["outputs"]["kubeconfig"] == SECRET


def test_provider_look_ups_fail_synthesis(tmp_path) -> None:
    program = tmp_path / "program"
    program.mkdir()
    (program / "__main__.py").write_text(
        "import pulumi_aws as aws\naws.get_availability_zones(state='available')\n"
    )
    with pytest.raises(SynthError, match="aws:index/getAvailabilityZones:getAvailabilityZones"):
        run_program("lookups", "us-east-1", program)


def test_manifests_are_written_as_yaml(plans, tmp_path) -> None:
    target = write_plan(plans("pretrain"), tmp_path)
    files = sorted((target / "manifests").glob("*.yaml"))
    # Monitoring's objects (components/monitoring.py) are tested there.
    monitoring = {"namespace-monitoring.yaml", "storageclass-gp3.yaml"}
    files = [f for f in files if "-monitoring-" not in f.name and f.name not in monitoring]
    # The platform's Trainer runtimes, each kind at each training priority
    # (manifests/jobs/trainjob.py).
    runtimes = sorted(
        f"clustertrainingruntime-llmp-{kind}-{priority.removeprefix('llmp-')}.yaml"
        for kind in ("deepspeed", "step", "torch")
        for priority in TRAINING_PRIORITIES
    )
    assert [f.name for f in files if f.name.startswith("clustertrainingruntime-")] == runtimes
    files = [f for f in files if not f.name.startswith("clustertrainingruntime-")]
    assert [f.name for f in files] == [
        "clusterqueue-foundation.yaml",
        "clusterqueue-spare.yaml",
        "cronjob-foundation-checkpoint-milestones.yaml",
        "limitrange-foundation-llmp-limits.yaml",
        "localqueue-foundation-default.yaml",
        "namespace-foundation.yaml",
        "networkpolicy-foundation-allow-aws-apis.yaml",
        "networkpolicy-foundation-allow-dns.yaml",
        "networkpolicy-foundation-allow-kuberay.yaml",
        "networkpolicy-foundation-allow-monitoring.yaml",
        "networkpolicy-foundation-allow-same-namespace.yaml",
        "networkpolicy-foundation-default-deny.yaml",
        "persistentvolume-fsx-lustre-foundation.yaml",
        "persistentvolumeclaim-foundation-fsx-lustre.yaml",
        "priorityclass-llmp-preemptible.yaml",
        "priorityclass-llmp-serving.yaml",
        "priorityclass-llmp-training-critical.yaml",
        "priorityclass-llmp-training.yaml",
        "resourceflavor-cpu.yaml",
        "resourceflavor-pool-h100-block.yaml",
        "resourceflavor-pool-h100.yaml",
        "resourcequota-foundation-llmp-priorities.yaml",
        "resourcequota-foundation-llmp-quota.yaml",
        "role-foundation-tenant-edit.yaml",
        "rolebinding-foundation-tenant-edit.yaml",
        "serviceaccount-foundation-checkpoint-milestones.yaml",
        "serviceaccount-foundation-training.yaml",
        "validatingadmissionpolicy-llmp-tenant-ingresses.yaml",
        "validatingadmissionpolicy-llmp-tenant-pods-foundation.yaml",
        "validatingadmissionpolicy-llmp-tenant-services.yaml",
        "validatingadmissionpolicybinding-llmp-tenant-ingresses.yaml",
        "validatingadmissionpolicybinding-llmp-tenant-pods-foundation.yaml",
        "validatingadmissionpolicybinding-llmp-tenant-services.yaml",
    ]
    doc = yaml.safe_load((target / "manifests/priorityclass-llmp-serving.yaml").read_text())
    assert doc["apiVersion"] == "scheduling.k8s.io/v1"
    assert doc["kind"] == "PriorityClass"
    assert doc["value"] == 100000 and isinstance(doc["value"], int)
    preemptible = yaml.safe_load(
        (target / "manifests/priorityclass-llmp-preemptible.yaml").read_text()
    )
    assert preemptible["preemptionPolicy"] == "Never"


def test_cost_output_follows_the_catalog(plans) -> None:
    cost = plans("pretrain").outputs["cost"]
    p5 = catalog().instance("p5.48xlarge")
    assert cost["node_pools"]["h100"]["usd_per_hour"]["desired"] == pytest.approx(
        16 * p5.on_demand_usd_per_hour
    )
    assert (
        cost["node_pools"]["h100-block"]["usd_per_instance_hour"] == p5.capacity_block_usd_per_hour
    )
    assert cost["node_pools"]["h100-block"]["usd_per_hour"]["desired"] == 0
    fixed = sum(cost["overhead_usd_per_hour"].values())
    m7i = catalog().instance("m7i.4xlarge").on_demand_usd_per_hour
    assert cost["system_pool"]["usd_per_hour"] == {
        "min": round(2 * m7i, 2),
        "desired": round(3 * m7i, 2),
        "max": round(6 * m7i, 2),
    }
    assert cost["usd_per_hour"]["desired"] == pytest.approx(16 * 55.04 + fixed + 3 * m7i, abs=0.01)
    assert cost["usd_per_hour"]["max"] == pytest.approx(
        # The system pool's 6 and the CPU pool data's 8 m7i.4xlarge at their max sizes.
        32 * 55.04 - 16 * (55.04 - p5.capacity_block_usd_per_hour) + fixed + (6 + 8) * m7i,
        abs=0.01,
    )
    assert cost["prices_as_of"] == catalog().prices.on_demand_as_of
    spot = plans("finetune").outputs["cost"]["node_pools"]["a100-spot"]
    assert spot["usd_per_instance_hour"] == pytest.approx(
        catalog().instance("p4de.24xlarge").on_demand_usd_per_hour
        * (1 - catalog().spot_discount_assumption),
        abs=1e-4,
    )


def test_cli_prints_tree_counts_and_cost_and_writes_the_plan(tmp_path) -> None:
    result = run_cli("synth", "inference", "--out", str(tmp_path), cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr
    assert "resources by type" in result.stdout
    assert "aws:eks/NodeGroup" in result.stdout  # the short type (llmp.plan.short_type)
    assert "cost: $" in result.stdout
    plan = json.loads((tmp_path / "inference/plan.json").read_text())
    assert plan["stack"] == "inference"


def test_cli_json_prints_the_plan_on_stdout(tmp_path) -> None:
    result = run_cli("synth", "finetune", "--json", "--out", str(tmp_path), cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["stack"] == "finetune"
    assert plan == json.loads((tmp_path / "finetune/plan.json").read_text())


def test_cli_unknown_stack_is_one_line_and_exit_2(tmp_path) -> None:
    result = run_cli("synth", "staging", "--out", str(tmp_path), cwd=REPO_ROOT)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "no stack file stacks/Pulumi.staging.yaml; known stacks: finetune, inference, "
        "pretrain (or pass --config FILE)"
    )
