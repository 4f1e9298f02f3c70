"""A team stack's network section is its shared stack's: region, VPC CIDR and AZs are
checked against the shared stack's outputs offline (its outputs file, or the plan of its
stack file beside the team's) and again at deploy time (the StackReference), and the
`adopted` output reports the shared stack's CIDRs, not the team's config."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

import llmp.plan.synth as synth
from llmp.errors import BadInput
from llmp.plan.synth import STAND_IN_S3_RANGES
from spec.errors import ConfigError
from spec.stackfile import load_stack_file

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "examples/stacks"
OUTPUTS_FILE = EXAMPLES / "shared.outputs.json"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"

WRONG_CIDR = (
    "config error: llm-platform:network.vpc_cidr = '10.71.0.0/16': is not the CIDR of "
    "shared_stack acme/llm-platform/shared's VPC, 10.70.0.0/16 (its vpc_cidr output): the "
    "stack takes network.vpc_cidr for the VPC's range (its network policies, its adopted "
    "output); set "
    "network.vpc_cidr: 10.70.0.0/16"
)
OLD_OUTPUTS = (
    "the outputs of shared_stack acme/llm-platform/shared lack vpc_cidr, "
    "private_subnet_cidrs, which this stack checks its network section against: that stack "
    "was deployed before it exported them; run `pulumi up` on it first"
)


def team(**network: Any) -> dict[str, Any]:
    raw = load_stack_file(str(EXAMPLES / "Pulumi.team.yaml"))
    raw["llm-platform:network"] = {**raw["llm-platform:network"], **network}
    return raw


def shared_outputs(**changes: Any) -> dict[str, Any]:
    outputs = json.loads(OUTPUTS_FILE.read_text())
    for key, value in changes.items():
        if value is None:
            outputs.pop(key, None)
        else:
            outputs[key] = value
    return outputs


def write(tmp: Path, raw: dict[str, Any], name: str = "team") -> Path:
    path = tmp / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump({"config": raw}))
    return path


def offline_error(raw: dict[str, Any], outputs: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        synth.synthesize("team", raw, shared_outputs=outputs)
    message = str(info.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------------------
# Offline: the outputs file, or the shared stack's file beside the team's
# ---------------------------------------------------------------------------


def test_a_team_vpc_cidr_that_is_not_the_shared_vpc_s_is_refused() -> None:
    assert offline_error(team(vpc_cidr="10.71.0.0/16"), shared_outputs()) == WRONG_CIDR


def test_the_shared_stack_s_file_beside_the_team_s_is_checked_too(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.shared.yaml").write_text((EXAMPLES / "Pulumi.shared.yaml").read_text())
    path = write(tmp_path, team(vpc_cidr="10.71.0.0/16"))
    with pytest.raises(ConfigError) as info:
        synth.synthesize_stack("team", path, quiet=True)
    assert str(info.value) == WRONG_CIDR


def test_the_outputs_file_is_checked(tmp_path: Path) -> None:
    path = write(tmp_path, team(vpc_cidr="10.71.0.0/16"))
    with pytest.raises(ConfigError) as info:
        synth.synthesize_stack("team", path, quiet=True, shared_outputs_file=OUTPUTS_FILE)
    assert str(info.value) == WRONG_CIDR


def test_a_team_stack_in_another_region_than_its_shared_stack() -> None:
    raw = team(availability_zones=["us-west-2a", "us-west-2b"])
    raw["aws:region"] = "us-west-2"
    raw["llm-platform:node_pools"]["h100"]["availability_zones"] = ["us-west-2b"]
    assert offline_error(raw, shared_outputs()) == (
        "config error: aws:region = 'us-west-2': shared_stack acme/llm-platform/shared is in "
        "us-east-1 (its region output): a team stack deploys into that stack's VPC and "
        "cluster; set aws:region: us-east-1"
    )


def test_an_az_the_shared_network_lacks() -> None:
    assert offline_error(
        team(availability_zones=["us-east-1b", "us-east-1c"]), shared_outputs()
    ) == (
        "config error: llm-platform:network.availability_zones.1 = 'us-east-1c': shared_stack "
        "acme/llm-platform/shared has no private subnet in us-east-1c (its subnets are in "
        "us-east-1a, us-east-1b): list only AZs of its network"
    )


def test_outputs_of_a_shared_stack_deployed_before_it_exported_its_cidrs() -> None:
    old = shared_outputs(vpc_cidr=None, private_subnet_cidrs=None)
    with pytest.raises(BadInput) as info:
        synth.synthesize("team", team(), shared_outputs=old)
    assert str(info.value) == OLD_OUTPUTS


def test_a_team_bucket_that_is_the_shared_stack_s() -> None:
    outputs = shared_outputs(buckets={"data": "acme-llm-team-code-datasets"})
    assert offline_error(team(), outputs) == (
        "config error: llm-platform:storage.buckets.datasets = 'acme-llm-team-code-datasets': "
        "is bucket data of shared_stack acme/llm-platform/shared (its buckets output): each "
        "stack's tenants are granted prefixes in its own buckets, and two stacks on one "
        "bucket would share their tenants' keys; set another storage.bucket_name_prefix"
    )


def test_the_same_cidr_written_otherwise_is_the_same() -> None:
    plan = synth.synthesize("team", team(), shared_outputs=shared_outputs(vpc_cidr="10.70.0.0/16"))
    assert plan.outputs["adopted"]["network"]["vpc_cidr"] == "10.70.0.0/16"


# ---------------------------------------------------------------------------
# Deploy time: the StackReference's values, checked before any resource uses them
# ---------------------------------------------------------------------------


DEPLOY = """
import json, sys
from collections import Counter
from pulumi.runtime.config import set_all_config
import llmp.plan.synth as synth

raw, outputs = (json.load(open(path)) for path in sys.argv[1:3])
made = []

class Recorded(synth.Plan):
    def model_post_init(self, context, /):
        made.append(self)

synth.Plan = Recorded
config, secret_keys = synth.engine_config(raw)
set_all_config(config, secret_keys)
try:
    synth.run_program("team", raw["aws:region"], shared_outputs=outputs)
    error = None
except synth.SynthError as exc:
    error = str(exc)
print(json.dumps({"error": error, "types": Counter(r.type for r in made[0].resources)}))
"""


def deploy(tmp: Path, raw: dict[str, Any], outputs: dict[str, Any]) -> tuple[str, Counter[str]]:
    """Run the program as `pulumi up` would, without the offline check: the error it stops
    on, and the types of what it registered before it stopped. In a process of its own: a
    program that fails leaves its outputs pending on the event loop."""
    (tmp / "raw.json").write_text(json.dumps(raw))
    (tmp / "outputs.json").write_text(json.dumps(outputs))
    result = subprocess.run(
        [sys.executable, "-c", DEPLOY, str(tmp / "raw.json"), str(tmp / "outputs.json")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    done = json.loads(result.stdout.splitlines()[-1])
    assert done["error"] is not None, "the program did not stop"
    return done["error"], Counter(done["types"])


def test_at_deploy_a_wrong_vpc_cidr_stops_the_program_before_the_cluster_is_used(
    tmp_path: Path,
) -> None:
    message, registered = deploy(tmp_path, team(vpc_cidr="10.71.0.0/16"), shared_outputs())
    assert message == WRONG_CIDR
    # Nothing that takes the shared network's or cluster's values was declared: no
    # Kubernetes provider, so no network policy, no node group.
    assert not [t for t in registered if t.startswith("kubernetes:")]
    assert NETWORK_POLICY not in registered
    assert "aws:eks/nodeGroup:NodeGroup" not in registered


def test_at_deploy_outputs_without_the_cidrs_stop_the_program(tmp_path: Path) -> None:
    old = shared_outputs(vpc_cidr=None, private_subnet_cidrs=None)
    message, registered = deploy(tmp_path, team(), old)
    assert message == OLD_OUTPUTS
    assert NETWORK_POLICY not in registered


# ---------------------------------------------------------------------------
# What passes: the shared stack's facts exported, and reported by the team stack
# ---------------------------------------------------------------------------


def test_the_shared_stack_exports_its_vpc_and_subnet_cidrs() -> None:
    raw = load_stack_file(str(EXAMPLES / "Pulumi.shared.yaml"))
    outputs = synth.synthesize("shared", raw).outputs
    assert outputs["vpc_cidr"] == "10.70.0.0/16"
    assert outputs["private_subnet_cidrs"] == {
        "us-east-1a": "10.70.0.0/18",
        "us-east-1b": "10.70.64.0/18",
    }
    assert outputs["region"] == "us-east-1"


def test_the_team_stack_reports_the_shared_stack_s_cidrs_and_fences_with_them() -> None:
    # The team's own subnet prefix would lay out /20s; the shared VPC's subnets are /18s.
    outputs = shared_outputs()
    plan = synth.synthesize("team", team(private_subnet_prefix=20), shared_outputs=outputs)
    net = plan.outputs["adopted"]["network"]
    assert net["vpc_cidr"] == outputs["vpc_cidr"]
    assert {z: s["cidr"] for z, s in net["private_subnets"].items()} == {
        z: outputs["private_subnet_cidrs"][z] for z in ("us-east-1a", "us-east-1b")
    }
    # Outside the VPC, the team's tenants reach S3's ranges only: no block with an
    # exception for a VPC range that could be the wrong one.
    blocks = [
        block["ipBlock"]
        for policy in plan.by_type(NETWORK_POLICY)
        for rule in policy.inputs["spec"].get("egress", [])
        for block in rule.get("to", [])
        if "ipBlock" in block
    ]
    assert blocks
    assert all("except" not in b for b in blocks)
    kms = {f"{a}/32" for a in outputs["kms_endpoint_addresses"]}
    assert {b["cidr"] for b in blocks} <= {*STAND_IN_S3_RANGES, *kms, "169.254.170.23/32"}
    # The shared stack's KMS endpoint, from its outputs: the team's promotion signs there.
    assert kms <= {b["cidr"] for b in blocks}


def test_both_example_team_stacks_pass_and_keep_to_buckets_of_their_own() -> None:
    names: dict[str, str] = {}
    for stack in ("team", "team-vision"):
        raw = load_stack_file(str(EXAMPLES / f"Pulumi.{stack}.yaml"))
        plan = synth.synthesize(stack, raw, shared_outputs=copy.deepcopy(shared_outputs()))
        for key, name in plan.outputs["buckets"].items():
            assert name not in names, f"{stack}'s {key} is {names.get(name)}'s too"
            names[name] = f"{stack} {key}"


def test_a_team_bucket_the_shared_endpoint_refuses_is_one_line() -> None:
    outputs = shared_outputs(s3_endpoint_buckets=["acme-llm-research-*"])
    assert offline_error(team(), outputs) == (
        "config error: llm-platform:storage.buckets.datasets = 'acme-llm-team-code-datasets': "
        "is refused by shared_stack acme/llm-platform/shared's S3 endpoint (it admits "
        "acme-llm-research-*): add acme-llm-team-code-* to its network.s3_endpoint_buckets"
    )


def test_a_shared_stack_without_an_endpoint_policy_of_its_own_checks_no_bucket() -> None:
    plan = synth.synthesize("team", team(), shared_outputs=shared_outputs(s3_endpoint_buckets=None))
    assert plan.resources


def test_the_example_shared_stack_admits_both_team_stacks_buckets() -> None:
    from program.adoption import shared_network
    from spec.stackfile import load_config

    shared = load_config(load_stack_file(str(EXAMPLES / "Pulumi.shared.yaml")))
    exported = shared_network(shared)["s3_endpoint_buckets"]
    assert exported == shared_outputs()["s3_endpoint_buckets"] == ["acme-llm-team-*"]
    for stack in ("team", "team-vision"):
        raw = load_stack_file(str(EXAMPLES / f"Pulumi.{stack}.yaml"))
        synth.synthesize(stack, raw, shared_outputs=shared_outputs())
