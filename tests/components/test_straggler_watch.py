"""The straggler watcher in the stack (components/straggler_watch.py): one Deployment in
`monitoring` running workloads/diagnosis/watch.py from the trainer image against the stack's
Prometheus, its ServiceAccount, the PodMonitor and NetworkPolicy of its scrape, its alert rules,
and RBAC only where it quarantines. The journey: the Deployment's command line is one the
watcher's own parser takes, the PodMonitor scrapes the port the container serves, the alert
reads what the watcher publishes at the interval it runs."""

from __future__ import annotations

import kubernetes_validate
import pulumi
import pytest

from components.straggler_watch import (
    NAME,
    PORT,
    PROMETHEUS_URL,
    QUARANTINE_RULES,
    StragglerWatch,
    StragglerWatchArgs,
)
from llmp.plan.synth import run
from monitoring import rules
from monitoring.charts import monitors
from spec.errors import ConfigError
from spec.stackfile import load_config
from tests.conftest import raw_stack, with_section
from workloads.diagnosis import watch

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
ACCOUNT = "kubernetes:core/v1:ServiceAccount"
POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
POD_MONITOR = "kubernetes:monitoring.coreos.com/v1:PodMonitor"
RULE = "kubernetes:monitoring.coreos.com/v1:PrometheusRule"
ROLE = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole"
BINDING = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding"
TAG = "trainer-v0.1.0"


def _deployment(plan) -> dict:
    return plan.one(DEPLOYMENT, "straggler-watch-deployment").inputs


def _container(plan) -> dict:
    (container,) = _deployment(plan)["spec"]["template"]["spec"]["containers"]
    return container


def _quarantining(synth, **overrides):
    return synth(
        with_section("pretrain", "monitoring", {"stragglers": {"quarantine": True, **overrides}})
    )


@pytest.mark.parametrize("stack", ["pretrain", "finetune"])
def test_the_training_stacks_run_one_watcher_with_the_trainer_image(plans, stack: str) -> None:
    plan = plans(stack)
    component = plan.one("llmp:monitoring:StragglerWatch", "straggler-watch")
    children = [r for r in plan.resources if r.name.startswith("straggler-watch-")]
    assert {r.type for r in children} == {DEPLOYMENT, ACCOUNT, POLICY, POD_MONITOR}
    assert all(r.parent == component.urn for r in children)
    deployment = _deployment(plan)
    assert deployment["metadata"]["namespace"] == "monitoring"
    assert deployment["spec"]["replicas"] == 1
    # Two watchers at once would double each quarantine decision.
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    container = _container(plan)
    repository = plan.outputs["trainer_image_repository"]
    assert container["image"] == f"{repository}:{TAG}"
    assert container["command"][:3] == ["python", "-m", "workloads.diagnosis.watch"]
    command = container["command"]
    assert command[command.index("--prometheus") + 1] == PROMETHEUS_URL
    assert "--quarantine" not in command
    # Read-only: no Kubernetes API, so no token and no role.
    pod = deployment["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == NAME
    assert not plan.by_type(ROLE) or all(
        not r.name.startswith("straggler") for r in plan.by_type(ROLE)
    )
    assert not [r for r in plan.by_type(BINDING) if r.name.startswith("straggler")]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["runAsNonRoot"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}


def test_the_prometheus_it_reads_is_the_stacks(plans) -> None:
    plan = plans("pretrain")
    kps = plan.one("kubernetes:helm.sh/v3:Release", "monitoring-kube-prometheus-stack").inputs
    assert kps["namespace"] == "monitoring"
    # kube-prometheus-stack names its Prometheus Service <release>-prometheus, port 9090.
    assert f"http://{kps['name']}-prometheus.monitoring:9090" == PROMETHEUS_URL


def test_no_watcher_where_it_is_off(plans) -> None:
    plan = plans("inference")
    assert not [r for r in plan.resources if r.name.startswith("straggler-watch")]
    names = [r.name for r in plan.by_type(RULE)]
    assert "monitoring-prometheusrule-llmp-stragglers" not in names


def test_its_alerts_come_with_it_at_its_interval(synth) -> None:
    plan = synth(with_section("pretrain", "monitoring", {"stragglers": {"interval_seconds": 120}}))
    spec = plan.one(RULE, "monitoring-prometheusrule-llmp-stragglers").inputs["spec"]
    by_name = {r["alert"]: r for g in spec["groups"] for r in g["rules"]}
    assert set(by_name) == {"LlmpSlowNode", "LlmpStragglerWatchDown", "LlmpStragglerWatchFailing"}
    assert by_name["LlmpStragglerWatchDown"]["expr"].endswith("> 600")
    command = _container(plan)["command"]
    assert command[command.index("--interval") + 1] == "120"


def test_the_command_line_is_one_the_watcher_takes(plans) -> None:
    """The journey from the stack file to the running loop: the Deployment's arguments parse
    with the watcher's own parser into settings it accepts, on the port the PodMonitor
    scrapes, with the thresholds of the stack file."""
    plan = plans("pretrain")
    container = _container(plan)
    args = watch.parser().parse_args(container["command"][3:])
    assert args.port == PORT == watch.DEFAULT_PORT
    assert args.address == "0.0.0.0"
    cfg = load_config(raw_stack("pretrain")).monitoring.stragglers
    settings = watch.WatchSettings.from_args(args)  # what main() runs with
    settings.check()
    assert (settings.window, settings.interval_s, settings.threshold, settings.persist) == (
        cfg.window,
        cfg.interval_seconds,
        cfg.threshold,
        cfg.persist,
    )
    assert (settings.quarantine, settings.quarantine_after, settings.max_quarantined) == (
        cfg.quarantine,
        cfg.quarantine_after_runs,
        cfg.max_quarantined,
    )
    # The PodMonitor selects the pod's labels and scrapes its named port; no honorLabels: the
    # series keep the target's namespace and `job` (the pod's name label), what the straggler
    # rules select on (the job judged is in training_namespace/training_job).
    monitor = plan.one(POD_MONITOR, "straggler-watch-podmonitor").inputs["spec"]
    pod_labels = _deployment(plan)["spec"]["template"]["metadata"]["labels"]
    assert monitor["selector"]["matchLabels"].items() <= pod_labels.items()
    [endpoint] = monitor["podMetricsEndpoints"]
    assert "honorLabels" not in endpoint
    assert pod_labels[monitor["jobLabel"]] == "llmp-straggler-watch"
    assert f'job="{pod_labels[monitor["jobLabel"]]}"' in rules.STRAGGLER_WATCH_TARGET
    assert endpoint["port"] == container["ports"][0]["name"] == "metrics"
    assert container["ports"][0]["containerPort"] == PORT
    # Only Prometheus' namespace reaches that port.
    policy = plan.one(POLICY, "straggler-watch-scrape").inputs["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["ingress"][0]["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    # The training PodMonitor does not scrape the watcher (it is no training pod).
    training = next(m for m in monitors("monitoring") if m.metadata.name == "training")
    assert not training.spec.selector.match_labels.items() <= pod_labels.items()


def test_quarantine_adds_a_cluster_role_limited_to_what_a_quarantine_does(synth) -> None:
    plan = _quarantining(synth, quarantine_after_runs=5, max_quarantined=1)
    role = plan.one(ROLE, "straggler-watch-role").inputs
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    ]
    assert len(role["rules"]) == len(QUARANTINE_RULES)
    binding = plan.one(BINDING, "straggler-watch-binding").inputs
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": NAME,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": NAME, "namespace": "monitoring"}
    ]
    pod = _deployment(plan)["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True
    command = _container(plan)["command"]
    assert command[-5:] == ["--quarantine", "--quarantine-after", "5", "--max-quarantined", "1"]
    args = watch.parser().parse_args(command[3:])
    assert (args.quarantine, args.quarantine_after, args.max_quarantined) == (True, 5, 1)
    # Only the PodMonitor waits (for the CRDs): nothing else needs an order.
    crds = plan.one("kubernetes:yaml/v2:ConfigFile", "monitoring-crds").urn
    for r in plan.resources:
        if r.name.startswith("straggler-watch-"):
            assert (crds in r.dependencies) == (r.type == POD_MONITOR), r.name


def test_the_quarantine_manifests_validate_strictly(synth) -> None:
    plan = _quarantining(synth)
    version = load_config(raw_stack("pretrain")).cluster.version
    kinds = set()
    for manifest in plan.manifests():
        if manifest["metadata"].get("name") != NAME:
            continue
        if manifest["apiVersion"].startswith("monitoring.coreos.com"):
            continue
        kubernetes_validate.validate(manifest, version, strict=True)
        kinds.add(manifest["kind"])
    assert kinds == {
        "ServiceAccount",
        "Deployment",
        "NetworkPolicy",
        "ClusterRole",
        "ClusterRoleBinding",
    }


@pytest.mark.parametrize(
    ("overrides", "key", "says"),
    [
        ({"image_tag": None}, "monitoring.stragglers.image_tag", "required when enabled"),
        ({"window": "6 minutes"}, "monitoring.stragglers.window", "a duration in s, m or h"),
        ({"window": "30s"}, "monitoring.stragglers.window", "at least 4 x resolution"),
        ({"image": "trainer:latest"}, "monitoring.stragglers.image", "not latest"),
        ({"persist": 0}, "monitoring.stragglers.persist", ""),
        ({"max_quarantined": 0}, "monitoring.stragglers.max_quarantined", ""),
    ],
)
def test_bad_watcher_config_is_one_line_naming_the_key(
    overrides: dict, key: str, says: str
) -> None:
    raw = with_section("pretrain", "monitoring", {"stragglers": overrides})
    with pytest.raises(ConfigError) as caught:
        load_config(raw)
    line = str(caught.value)
    assert "\n" not in line and f"llm-platform:{key}" in line and says in line, line


def test_a_stack_without_its_image_repository_must_name_the_image(synth) -> None:
    raw = with_section("pretrain", "images", {"enabled": False})
    # The milestone copier runs the trainer image too: name it, to reach the watcher's.
    retention = raw["llm-platform:storage"]["buckets"]["checkpoints"]["retention"]
    retention["image"] = "registry.example.com/trainer:trainer-v0.1.0"
    with pytest.raises(ConfigError, match=r"monitoring\.stragglers\.image = <missing>: required"):
        synth(raw)
    raw["llm-platform:monitoring"]["stragglers"]["image"] = (
        "registry.example.com/trainer:trainer-v0.1.0"
    )
    plan = synth(raw)
    assert _container(plan)["image"] == "registry.example.com/trainer:trainer-v0.1.0"


def test_a_watcher_alone_from_its_own_args() -> None:
    def program() -> None:
        StragglerWatch(
            "watch",
            StragglerWatchArgs(
                image="registry.example.com/trainer@sha256:" + "0" * 64,
                prometheus_url="http://prometheus.example:9090",
                window="15m",
                quarantine=True,
            ),
            pulumi.ResourceOptions(),
        )

    plan = run("alone", "eu-west-1", program)
    container = plan.one(DEPLOYMENT, "watch-deployment").inputs["spec"]["template"]["spec"][
        "containers"
    ][0]
    command = container["command"]
    assert command[command.index("--prometheus") + 1] == "http://prometheus.example:9090"
    assert command[command.index("--window") + 1] == "15m"
    assert plan.one(ROLE, "watch-role")
    assert rules.STRAGGLER_LAST_RUN in watch.METRICS
