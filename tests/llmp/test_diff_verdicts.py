"""`llmp diff` says what `pulumi up` will do: each stack mutated the way a PR would, and
the verdict of each: what applies, what the program ignores (and who owns it), what
rolls every node of a pool, what replaces one and who feels it, what is not known
offline."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from llmp.diff import DiffReport, report_of_plans
from llmp.diff.render import effect_lines, render_markdown
from llmp.plan import Plan
from tests.conftest import merge, raw_stack

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"


@pytest.fixture(scope="module")
def verdict() -> Callable[..., DiffReport]:
    """verdict(stack, overrides) -> the report of the stack file against it with
    `overrides` deep-merged into its raw config."""
    from llmp.plan.synth import synthesize

    bases: dict[str, Plan] = {}

    def run(stack: str, overrides: dict[str, Any]) -> DiffReport:
        if stack not in bases:
            bases[stack] = synthesize(stack, raw_stack(stack))
        head = synthesize(stack, merge(raw_stack(stack), overrides))
        return report_of_plans(stack, bases[stack], head)

    return run


def _pool(section: str, name: str, **values: Any) -> dict[str, Any]:
    return {f"llm-platform:{section}": {name: values}}


def _desired(report: DiffReport) -> float | None:
    (line,) = [c for c in report.cost["totals"] if c.measure == "$/h at desired size"]
    return line.delta


def _changed(report: DiffReport, name: str) -> list[str]:
    return [c.path for rc in report.diff.changed if rc.name == name for c in rc.changes]


def test_an_autoscaled_pools_desired_size_is_no_effect_and_costs_nothing(verdict) -> None:
    report = verdict("finetune", _pool("node_pools", "h100", desired_size=2))
    (ignored,) = report.diff.ignored
    assert (ignored.name, ignored.path) == ("gpu-h100-nodes", "scalingConfig.desiredSize")
    assert "Cluster Autoscaler owns" in ignored.reason
    assert "update-nodegroup-config" in ignored.reason  # what does apply it
    assert not report.diff.changed and not report.rolls
    assert _desired(report) == 0
    assert any("no effect at `pulumi up`" in line for line in effect_lines(report))
    assert "1 changes `pulumi up` does not make" in report.summary()


def test_a_fixed_pools_sizes_apply_together_as_the_api_requires(verdict) -> None:
    """min = desired = max, nothing scales it: the program owns the desired size, so the
    three reach UpdateNodegroupConfig together and min <= desired <= max holds."""
    sizes = {"min_size": 18, "desired_size": 18, "max_size": 18}
    report = verdict("pretrain", _pool("node_pools", "h100", **sizes))
    assert not report.diff.ignored and not report.diff.refused and not report.unknown
    assert sorted(_changed(report, "gpu-h100-nodes")) == [
        "scalingConfig.desiredSize",
        "scalingConfig.maxSize",
        "scalingConfig.minSize",
    ]
    assert not report.rolls and not report.diff.replacements
    assert _desired(report) == pytest.approx(2 * 55.04, abs=0.01)  # two more p5.48xlarge


def test_min_and_max_of_an_autoscaled_pool_apply_in_place(verdict) -> None:
    report = verdict("finetune", _pool("node_pools", "h100", max_size=8))
    assert _changed(report, "gpu-h100-nodes") == ["scalingConfig.maxSize"]
    assert not report.rolls and not report.diff.replacements and not report.unknown
    (at_max,) = [c for c in report.cost["totals"] if c.measure == "$/h at max size"]
    assert at_max.delta and at_max.delta > 0


def test_a_min_above_the_desired_size_at_creation_is_not_known_offline(verdict) -> None:
    sizes = {"min_size": 2, "desired_size": 2, "max_size": 4}
    report = verdict("finetune", _pool("node_pools", "h100", **sizes))
    assert any("not known offline" in u and "min_size" in u for u in report.unknown)
    assert report.diff.ignored  # the desired size itself stays the autoscaler's


def test_a_root_disk_size_rolls_the_pool(verdict) -> None:
    report = verdict("pretrain", _pool("node_pools", "h100", disk_size_gib=600))
    (roll,) = report.rolls
    assert roll.pool == "h100" and roll.nodes == 16 and roll.max_unavailable == 1
    assert roll.waves == 16
    assert "volumeSize 500 → 600" in roll.causes[0]
    assert any(e.startswith("training:") for e in roll.effects())
    assert not report.diff.precious_replacements
    assert "1 node pools roll" in report.summary()


def test_an_eks_minor_bump_rolls_every_pool_after_the_control_plane(synth) -> None:
    """The catalog supports one minor today, so the bump is made on the plan: the
    cluster's and every node group's `version`, as the program sets them from it."""
    base = synth(raw_stack("pretrain"), "pretrain")  # not the session's: others edit it
    resources = []
    for r in base.resources:
        if r.type in (NODE_GROUP, "aws:eks/cluster:Cluster"):
            r = r.model_copy(update={"inputs": {**r.inputs, "version": "1.36"}})
        resources.append(r)
    report = report_of_plans("pretrain", base, base.model_copy(update={"resources": resources}))
    groups = {r.resource for r in report.rolls}
    assert not report.diff.replacements, [(r.name, r.reason) for r in report.diff.replacements]
    assert groups == {"cluster-system", "gpu-h100-nodes", "gpu-h100-block-nodes", "cpu-data-nodes"}
    for roll in report.rolls:
        assert roll.causes == ["Kubernetes version \"1.35\" → \"1.36\""]
    cluster = [rc for rc in report.diff.changed if rc.type == "aws:eks/cluster:Cluster"]
    assert cluster and not report.diff.replacements  # the control plane upgrades in place
    # The node groups take the cluster's version output: they roll after it.
    urn = next(r.urn for r in base.resources if r.type == "aws:eks/cluster:Cluster")
    for r in base.resources:
        if r.type == NODE_GROUP:
            assert urn in r.dependencies


def test_an_ami_release_version_rolls_the_pool(verdict) -> None:
    from spec.catalog import catalog

    version = raw_stack("pretrain").get("llm-platform:cluster", {}).get("version")
    version = version or catalog().eks.default_version
    release = f"{version}.0-20261120"
    report = verdict("pretrain", _pool("node_pools", "h100", release_version=release))
    (roll,) = report.rolls
    assert roll.pool == "h100" and roll.causes[0].startswith("AMI release version")


def test_an_ami_release_for_another_minor_is_refused_with_one_line(synth) -> None:
    from spec.errors import ConfigError

    other = _pool("node_pools", "h100", release_version="1.20.0-20261120")
    with pytest.raises(ConfigError, match=r"node_pools\.h100\.release_version"):
        synth(merge(raw_stack("pretrain"), other))


def test_a_taint_or_label_changes_in_place_without_a_roll(verdict, synth) -> None:
    report = verdict("finetune", _pool("node_pools", "h100", labels={"team": "chat"}))
    assert "labels.team" in _changed(report, "gpu-h100-nodes")
    assert not report.rolls and not report.diff.replacements
    # Taints follow the pool's name, not a config key: changed on the plan instead.
    base = synth(raw_stack("finetune"), "finetune")  # not the session's: others edit it
    extra = {"key": "llm-platform/maintenance", "value": "true", "effect": "NO_SCHEDULE"}
    resources = []
    for r in base.resources:
        if r.name == "gpu-h100-nodes" and r.type == NODE_GROUP:
            taints = [*r.inputs.get("taints", []), extra]
            r = r.model_copy(update={"inputs": {**r.inputs, "taints": taints}})
        resources.append(r)
    tainted = report_of_plans("finetune", base, base.model_copy(update={"resources": resources}))
    assert any(p.startswith("taints") for p in _changed(tainted, "gpu-h100-nodes"))
    assert not tainted.rolls and not tainted.diff.replacements and not tainted.diff.refused


def test_tags_reach_the_instances_through_the_launch_template_and_roll(verdict) -> None:
    """Instance tags are the launch template's tag specifications: a new template version,
    which a node group pinned to the latest version rolls onto. Said, not hidden."""
    report = verdict("pretrain", {"llm-platform:tags": {"extra": {"owner": "ml-infra"}}})
    assert report.rolls
    assert all("tagSpecifications" in " ".join(r.causes) for r in report.rolls)


def test_a_serving_pools_instance_type_replaces_it_and_names_the_model(verdict) -> None:
    report = verdict("inference", _pool("node_pools", "l40s", instance_type="g6e.48xlarge"))
    replaced = {r.name for r in report.diff.replacements if r.type == NODE_GROUP}
    assert "gpu-l40s-nodes" in replaced
    (t,) = [t for t in report.transitions if t.pool == "l40s"]
    assert t.order == "delete-first"  # the node group's name is fixed
    effects = t.effects()
    assert any("llama-8b" in e and e.startswith("serving:") for e in effects)
    assert any("serves nothing" in e for e in effects)
    assert not any(e.startswith("training:") for e in effects)
    comment = render_markdown(report)
    assert "llama-8b" in comment and "restarts from its last checkpoint" not in comment
