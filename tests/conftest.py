"""Shared harness: synthesize stacks once per session, and variants of them on demand;
a moto server on 127.0.0.1 with dummy credentials for the boto3 tooling; the two tiers.

Every test sees the platform the way `llmp synth` and `pulumi up` do: the
real program in program/, run under Pulumi's mock runtime.
"""

from __future__ import annotations

import copy
import json
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from llmp.plan.synth import Plan, synthesize
from llmp.stacks import stack_file
from spec.stackfile import load_stack_file

STACKS = ("pretrain", "finetune", "inference")

# ---------------------------------------------------------------------------
# Tiers: `pytest --tier check` (make check) runs what needs no torch, Ray, DeepSpeed,
# transformers, lm-eval, llm-compressor, PyAV or datatrove (requirements-check.txt);
# the full tier (the default, make test) runs everything (requirements-dev.txt).
# ---------------------------------------------------------------------------

TIERS = ("check", "full")
FULL_TIER_ONLY = {
    "workloads": "the code that runs in pods, on torch, Ray, DeepSpeed and transformers",
    "llmp/test_loadtest_peer.py": "guidellm, the peer load-test client, brings torch",
}
"""Paths under tests/ that only the full tier collects, and why."""
TESTS_DIR = Path(__file__).resolve().parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tier",
        choices=TIERS,
        default="full",
        help="check: the tests that need no in-pod libraries (make check); full: all",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "full_tier(why): runs only in the full tier (it imports the code that runs in pods)",
    )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if config.getoption("--tier") != "check":
        return None
    try:
        rel = collection_path.resolve().relative_to(TESTS_DIR).as_posix()
    except ValueError:
        return None
    if any(rel == path or rel.startswith(path + "/") for path in FULL_TIER_ONLY):
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--tier") != "check":
        return
    deselected = [item for item in items if item.get_closest_marker("full_tier")]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not item.get_closest_marker("full_tier")]


def raw_stack(stack: str) -> dict[str, Any]:
    return load_stack_file(str(stack_file(stack)))


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge `overrides` into a copy of `base`; a None value deletes the key."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def with_section(stack: str, section: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """A stack's raw config with `llm-platform:<section>` deep-merged with `overrides`."""
    raw = raw_stack(stack)
    key = f"llm-platform:{section}"
    raw[key] = merge(raw.get(key, {}), overrides)
    return raw


_plans: dict[str, Plan] = {}


@pytest.fixture(scope="session")
def plans() -> Callable[[str], Plan]:
    """plans("pretrain") -> the synthesized Plan of that stack file (cached)."""

    def get(stack: str) -> Plan:
        if stack not in _plans:
            _plans[stack] = synthesize(stack, raw_stack(stack))
        return _plans[stack]

    return get


@pytest.fixture
def synth() -> Callable[..., Plan]:
    """synth(raw_config, stack="test") -> a fresh Plan of any config."""

    def run(raw: dict[str, Any], stack: str = "test") -> Plan:
        return synthesize(stack, raw)

    return run


@pytest.fixture(scope="module")
def moto_server() -> Iterator[str]:
    """A moto server on 127.0.0.1 (an ephemeral port), stopped when the module ends."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        assert host == "127.0.0.1"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def inputs_of(plan: Plan, type_: str, name: str) -> dict[str, Any]:
    return plan.one(type_, name).inputs


def config_error(raw: dict[str, Any]) -> str:
    """The ConfigError `raw` gives, asserted to be one line."""
    from spec.errors import ConfigError
    from spec.stackfile import load_config

    with pytest.raises(ConfigError) as info:
        load_config(raw)
    message = str(info.value)
    assert "\n" not in message
    return message


def use_dummy_credentials(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, region: str = "us-east-1"
) -> None:
    """Dummy credentials only; no profile, config file or instance metadata is consulted."""
    for var in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", region)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


def reset_moto(url: str) -> str:
    """Empty the moto server's account, and return its URL."""
    request = urllib.request.Request(f"{url}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
    return url


def create_signing_key(url: str, bucket: str) -> str:
    """In the moto server at `url`: the revision-signing key of the models bucket `bucket`
    (ECC P-256, SIGN_VERIFY) under its alias, as the stack declares it; its ARN."""
    import boto3

    from contracts.revisions import signing_key_alias

    kms = boto3.client("kms", endpoint_url=url)
    key = kms.create_key(KeyUsage="SIGN_VERIFY", KeySpec="ECC_NIST_P256")["KeyMetadata"]
    kms.create_alias(AliasName=signing_key_alias(bucket), TargetKeyId=key["KeyId"])
    return str(key["Arn"])


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Dummy credentials for one test (`use_dummy_credentials`); a module that talks to
    moto throughout says `pytestmark = pytest.mark.usefixtures("aws_env")`."""
    use_dummy_credentials(monkeypatch, tmp_path)


@pytest.fixture
def endpoint(moto_server: str) -> str:
    """The moto server, emptied: every test starts from an empty account."""
    return reset_moto(moto_server)


@pytest.fixture
def plan(plans: Callable[[str], Plan], request: pytest.FixtureRequest) -> dict[str, Any]:
    """The plan of the requesting module's `STACK`, as `llmp synth --json` writes it."""
    return plans(request.module.STACK).to_dict()


@pytest.fixture
def plan_file(plan: dict[str, Any], tmp_path: Path) -> Path:
    """`plan` written to a file, for the commands that take `--plan FILE`."""
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    return path
