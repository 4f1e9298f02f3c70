"""The ScaledObjects as KEDA reads them: against the pinned chart's CRD schema, and with the
serving hours meaning what they meant before the cron scaler's change of 2.18.

The CRD is test data: keda/templates/crds/crd-scaledobjects.yaml of kedacore/charts at tag
v2.20.2 (commit cbb9bb8ce0809dc9048f72302f7c09765d66ed56), the file the chart installs,
verbatim (sha256 c597a1692044588f34d2f558c68b37e4db3e8f0a930ce6dc0397feb777473808); its
Helm template lines (`{{ ... }}`: the install switch and the labels) are dropped here before
it is read. Bumping `serving.keda` means re-vendoring it from the new tag.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import jsonschema
import pytest
import yaml

from manifests.serving import keda
from spec.catalog import catalog
from spec.serving import ServingModelConfig, ServingScheduleConfig
from tests.manifests.serving.test_multinode import _unknown_fields

CRD = Path(__file__).parent / "data" / "keda.sh_scaledobjects.yaml"
CRD_CHART_VERSION = "2.20.2"

HOURS = ServingScheduleConfig(timezone="Europe/Paris", start="0 7 * * 1-5", end="0 20 * * 1-5")
LLAMA_8B = {
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
}


def _model(**overrides: Any) -> ServingModelConfig:
    base = {"name": "m", "revision": "m/1", "node_pool": "l40s", "architecture": LLAMA_8B}
    return ServingModelConfig.model_validate({**base, **overrides})


def _crd() -> dict[str, Any]:
    text = "\n".join(line for line in CRD.read_text().splitlines() if "{{" not in line)
    return yaml.safe_load(text)


def _schema() -> dict[str, Any]:
    [version] = [v for v in _crd()["spec"]["versions"] if v["name"] == "v1alpha1"]
    assert version["served"] and version["storage"]
    return version["schema"]["openAPIV3Schema"]


def test_the_vendored_crd_is_the_pinned_charts() -> None:
    pins = catalog().serving
    assert pins is not None
    assert pins.keda.version == CRD_CHART_VERSION, (
        "serving.keda moved: vendor keda/templates/crds/crd-scaledobjects.yaml of "
        "kedacore/charts at the new tag into tests/manifests/serving/data"
    )
    crd = _crd()
    assert crd["metadata"]["name"] == "scaledobjects.keda.sh"
    assert f"{crd['spec']['group']}/v1alpha1" == keda.API_VERSION


@pytest.mark.parametrize("target", ["Deployment", "LeaderWorkerSet"])
@pytest.mark.parametrize("hours", [HOURS, None], ids=["hours", "always"])
def test_every_scaled_object_validates_against_the_charts_crd(
    target: Literal["Deployment", "LeaderWorkerSet"], hours: ServingScheduleConfig | None
) -> None:
    obj = keda.scaled_object(_model(min_replicas=2), "http://p:9090", hours, {}, target).manifest()
    assert (obj["apiVersion"], obj["kind"]) == (keda.API_VERSION, _crd()["spec"]["names"]["kind"])
    jsonschema.Draft7Validator(_schema()).validate({**obj, "metadata": {}})
    assert _unknown_fields(obj["spec"], _schema()["properties"]["spec"]) == []


def test_the_schema_check_catches_a_broken_object_and_a_misspelt_field() -> None:
    spec = keda.scaled_object(_model(), "http://p:9090", HOURS, {}).manifest()["spec"]
    without_type = {**spec, "triggers": [{"metadata": {}}]}
    with pytest.raises(jsonschema.ValidationError, match="type"):
        jsonschema.Draft7Validator(_schema()).validate({"spec": without_type})
    typo = {**spec, "cooldownPeriods": 600}
    assert _unknown_fields(typo, _schema()["properties"]["spec"]) == [".cooldownPeriods"]


def test_outside_the_hours_the_cron_trigger_holds_no_replica_before_or_after_keda_2_18() -> None:
    """KEDA 2.18 (kedacore/keda#6886) made the cron scaler report 0 outside its interval
    instead of 1. The HPA that KEDA creates reads that metric against an AverageValue target
    of 1 (cron_scaler.go: the metric type left to its default), so it asks for ceil(metric)
    replicas: 1 before, 0 now, and its floor is 1 (KEDA sets the HPA's minReplicas to 1 when
    minReplicaCount is 0). Either way the queue trigger sets the count while a model is
    active, and KEDA itself takes it to zero once no trigger has been active for the
    cooldown. The change would bite with `advanced.scalingModifiers` (a formula over the
    cron metric, the case of #6886) or another metric type: this object has neither."""
    spec = keda.scaled_object(_model(min_replicas=2), "http://p:9090", HOURS, {}).manifest()["spec"]
    [cron] = [t for t in spec["triggers"] if t["type"] == "cron"]
    assert spec["minReplicaCount"] == 0
    assert "advanced" not in spec and "idleReplicaCount" not in spec
    assert "metricType" not in cron
    assert cron["metadata"]["desiredReplicas"] == "2"
