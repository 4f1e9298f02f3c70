"""The ALB ingress rule: HTTPS only, a certificate, a WAF when internet-facing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import STACKS
from tests.policies.conftest import add, hits, inputs, names

RULE = "k8s-alb-ingress-https"
INGRESS = "kubernetes:networking.k8s.io/v1:Ingress"
ALB = "alb.ingress.kubernetes.io/"


def _ingress(p: dict, **notes: Any) -> None:
    annotations = {
        f"{ALB}scheme": "internet-facing",
        f"{ALB}listen-ports": json.dumps([{"HTTPS": 443}]),
        f"{ALB}certificate-arn": "arn:aws:acm:us-east-1:123456789012:certificate/x",
        f"{ALB}wafv2-acl-arn": "arn:aws:wafv2:us-east-1:123456789012:regional/webacl/x/y",
    }
    for key, value in notes.items():
        key = f"{ALB}{key.replace('_', '-')}"
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    add(
        p,
        INGRESS,
        "api",
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": {"name": "api", "namespace": "serving", "annotations": annotations},
            "spec": {"ingressClassName": "alb", "rules": []},
        },
    )


@pytest.mark.parametrize("stack", STACKS)
def test_quiet_on_the_stacks(plan, stack: str) -> None:
    assert hits(plan(stack), RULE) == []


def test_the_inference_ingress_is_checked_and_passes(plan) -> None:
    p = plan("inference")
    assert inputs(p, "serving-api", INGRESS)["spec"]["ingressClassName"] == "alb"
    assert hits(p, RULE) == []


def test_a_good_ingress_passes(plan) -> None:
    p = plan()
    _ingress(p)
    assert hits(p, RULE) == []


@pytest.mark.parametrize(
    "notes",
    [
        {"listen_ports": None},
        {"listen_ports": json.dumps([{"HTTP": 80}, {"HTTPS": 443}])},
        {"certificate_arn": None},
        {"wafv2_acl_arn": None},
    ],
)
def test_plain_http_no_certificate_or_no_waf_fires(plan, notes: dict[str, Any]) -> None:
    p = plan()
    _ingress(p, **notes)
    assert names(hits(p, RULE)) == {"api"}


def test_an_http_listener_that_redirects_and_an_internal_alb_without_waf_pass(plan) -> None:
    p = plan()
    _ingress(
        p,
        listen_ports=json.dumps([{"HTTP": 80}, {"HTTPS": 443}]),
        ssl_redirect="443",
        scheme="internal",
        wafv2_acl_arn=None,
    )
    assert hits(p, RULE) == []
