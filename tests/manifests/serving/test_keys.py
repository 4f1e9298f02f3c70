"""The gateway's keys outside Kubernetes: the SecretProviderClass against the pinned driver's
CRD, the reader's IAM policy, the charts' values, and the inference stack as declared (the
secrets, their key, the role, the account, the mount and the order they are made in).

The CRD is test data: charts/secrets-store-csi-driver/crds/
secrets-store.csi.x-k8s.io_secretproviderclasses.yaml at kubernetes-sigs/secrets-store-csi-
driver tag v1.6.0 (the catalog's pin; sha256 ef1623b34403bb11311fc92763b5b364ba456a166f1637e
eec8d29052dd115f3), checked in because the tests run offline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import ValidationError

from components.serving import csi_driver_values, csi_provider_values
from manifests.serving import keys
from spec.catalog import catalog

CRD = Path(__file__).parent / "data" / "secrets-store.csi.x-k8s.io_secretproviderclasses.yaml"
SECRET = "aws:secretsmanager/secret:Secret"
SECRET_VERSION = "aws:secretsmanager/secretVersion:SecretVersion"
SPC = "kubernetes:secrets-store.csi.x-k8s.io/v1:SecretProviderClass"
RELEASE = "kubernetes:helm.sh/v3:Release"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
MODELS = ("llama-8b", "llama-70b")


def _schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    [v1] = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    assert v1["storage"] and v1["served"]
    return v1["schema"]["openAPIV3Schema"]


def _spc() -> dict[str, Any]:
    return keys.secret_provider_class(
        "m", "c/serving/m/gateway", "us-east-1", {"a": "b"}
    ).manifest()


def test_the_provider_class_validates_against_the_v1_6_0_crd_and_syncs_no_secret() -> None:
    spc = _spc()
    jsonschema.validate({**spc, "metadata": {}}, _schema())
    spec_schema = _schema()["properties"]["spec"]["properties"]
    assert set(spc["spec"]) <= set(spec_schema) and "secretObjects" not in spc["spec"]
    assert all(isinstance(v, str) for v in spc["spec"]["parameters"].values())
    with pytest.raises(ValidationError):
        keys.SecretProviderClassSpec.model_validate(
            {"parameters": {}, "secretObjects": [{"secretName": "x"}]}
        )


def test_the_provider_reads_the_models_secret_through_pod_identity() -> None:
    params = _spc()["spec"]["parameters"]
    assert params["usePodIdentity"] == "true" and params["region"] == "us-east-1"
    [obj] = yaml.safe_load(params["objects"])
    assert obj == {
        "objectName": "c/serving/m/gateway",
        "objectType": "secretsmanager",
        "objectAlias": "listeners.yaml",
        "filePermission": "0444",
    }
    assert keys.secret_name("c", "m") == "c/serving/m/gateway"
    volume = keys.keys_volume("m")
    assert volume.csi.driver == keys.CSI_DRIVER and volume.csi.read_only
    assert volume.csi.volume_attributes == {"secretProviderClass": "m-gateway-keys"}


def test_the_reader_may_read_only_these_secrets_and_decrypt_only_through_secrets_manager() -> None:
    arns = [
        "arn:aws:secretsmanager:us-east-1:1:secret:b",
        "arn:aws:secretsmanager:us-east-1:1:secret:a",
    ]
    policy = json.loads(keys.reader_policy(arns, "arn:aws:kms:us-east-1:1:key/k", "us-east-1"))
    read, decrypt = policy["Statement"]
    assert read["Action"] == ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"]
    assert read["Resource"] == sorted(arns)
    assert decrypt["Action"] == "kms:Decrypt"
    assert decrypt["Condition"] == {
        "StringEquals": {"kms:ViaService": "secretsmanager.us-east-1.amazonaws.com"}
    }
    # Without a stack key, Secrets Manager's own key: no KMS statement at all.
    [only] = json.loads(keys.reader_policy(arns, None, "us-east-1"))["Statement"]
    assert only["Sid"] == "ReadGatewayKeys"


def test_the_driver_rotates_requests_pod_identity_tokens_and_writes_the_files() -> None:
    driver = csi_driver_values()
    assert driver["tokenRequests"] == [{"audience": "pods.eks.amazonaws.com"}]
    assert driver["enableSecretRotation"] is True and driver["rotationPollInterval"] == "2m"
    assert driver["syncSecret"] == {"enabled": False}
    provider = csi_provider_values("eu-west-1")
    # The driver is its own pinned release, and writes the files (atomically).
    assert provider["secrets-store-csi-driver"] == {"install": False}
    assert provider["driverWritesSecrets"] is True and provider["awsRegion"] == "eu-west-1"
    # On every node the model pods run on: GPU nodes are tainted.
    assert provider["tolerations"] == [{"operator": "Exists"}]


# -- the inference stack as declared ----------------------------------------------------


def test_the_charts_are_the_catalogs_pins(plans) -> None:
    plan = plans("inference")
    pins = catalog().serving
    assert pins is not None
    for name, chart in (
        ("serving-secrets-store-csi-driver", pins.secrets_store_csi_driver),
        ("serving-secrets-store-csi-driver-provider-aws", pins.secrets_store_provider_aws),
    ):
        release = plan.one(RELEASE, name).inputs
        assert release["version"] == chart.version
        assert release["repositoryOpts"]["repo"] == chart.repository
        assert release["namespace"] == "kube-system"
    provider = plan.one(RELEASE, "serving-secrets-store-csi-driver-provider-aws")
    assert plan.one(RELEASE, "serving-secrets-store-csi-driver").urn in provider.dependencies


def test_each_models_keys_are_one_secret_under_the_stacks_key(plans) -> None:
    plan = plans("inference")
    storage_key = plan.one("aws:kms/key:Key", "storage-s3")
    for model in MODELS:
        secret = plan.one(SECRET, f"serving-{model}-keys")
        assert secret.inputs["name"] == f"llm-platform-inference/serving/{model}/gateway"
        assert secret.inputs["kmsKeyId"] == "arn:aws:mock:us-east-1:000000000000:key/storage-s3"
        assert storage_key.urn in secret.dependencies
        version = plan.one(SECRET_VERSION, f"serving-{model}-keys")
        assert secret.urn in version.dependencies
        spc = plan.one(SPC, f"serving-{model}-keys").inputs
        [obj] = yaml.safe_load(spc["spec"]["parameters"]["objects"])
        assert obj["objectName"] == secret.inputs["name"]
        assert "secretObjects" not in spc["spec"]


def test_only_the_model_servers_account_may_read_them(plans) -> None:
    plan = plans("inference")
    association = plan.one(
        "aws:eks/podIdentityAssociation:PodIdentityAssociation", "serving-model-server"
    ).inputs
    assert (association["namespace"], association["serviceAccount"]) == (
        "serving",
        keys.MODEL_SERVER_SA,
    )
    policy = json.loads(
        plan.one("aws:iam/rolePolicy:RolePolicy", "serving-model-server").inputs["policy"]
    )
    secrets = sorted(f"arn:aws:mock:us-east-1:000000000000:secret/serving-{m}-keys" for m in MODELS)
    assert policy["Statement"][0]["Resource"] == secrets
    account = plan.one("kubernetes:core/v1:ServiceAccount", "serving-model-server").inputs
    assert account["automountServiceAccountToken"] is False


def test_a_model_pod_starts_only_once_its_keys_can_be_mounted(plans) -> None:
    plan = plans("inference")
    association = plan.one(
        "aws:eks/podIdentityAssociation:PodIdentityAssociation", "serving-model-server"
    )
    releases = [
        plan.one(RELEASE, "serving-secrets-store-csi-driver"),
        plan.one(RELEASE, "serving-secrets-store-csi-driver-provider-aws"),
    ]
    for model in MODELS:
        deployment = plan.one(DEPLOYMENT, f"serving-{model}")
        spc = plan.one(SPC, f"serving-{model}-keys")
        for needed in (association, spc, *releases):
            assert needed.urn in deployment.dependencies, (model, needed.name)
        pod = deployment.inputs["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == keys.MODEL_SERVER_SA
        [volume] = [v for v in pod["volumes"] if v["name"] == keys.VOLUME]
        assert (
            volume["csi"]["volumeAttributes"]["secretProviderClass"]
            == (spc.inputs["metadata"]["name"])
        )
    assert not [
        r for r in plan.by_type("kubernetes:core/v1:Secret") if r.name.startswith("serving")
    ]
