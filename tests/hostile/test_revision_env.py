"""`llmp diff --base REF` runs REF's code: whoever pushed REF chose it. Its interpreter
sees none of the caller's credentials, its own empty HOME, and no network."""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmp.plan import revision
from llmp.plan.revision import RevisionError

GIT = ["git", "-c", "user.name=llmp tests", "-c", "user.email=tests@example.invalid"]

SECRETS = {
    "AWS_ACCESS_KEY_ID": "AKIACANARY0000000000",
    "AWS_SECRET_ACCESS_KEY": "canary-secret-access-key",
    "AWS_SESSION_TOKEN": "canary-session-token",
    "AWS_PROFILE": "canary-profile",
    "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/canary",
    "AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/secrets/canary-token",
    "PULUMI_ACCESS_TOKEN": "pul-canary-token",
    "PULUMI_CONFIG_PASSPHRASE": "canary-passphrase",
    "PULUMI_CONFIG_PASSPHRASE_FILE": "/canary/passphrase",
    "PULUMI_BACKEND_URL": "s3://canary-state",
    "GOOGLE_APPLICATION_CREDENTIALS": "/canary/gcp.json",
    "AZURE_CLIENT_SECRET": "canary-azure-secret",
    "KUBECONFIG": "/canary/kubeconfig",
    "GITHUB_TOKEN": "ghp_canary",
    "HF_TOKEN": "hf_canary",
    "SSH_AUTH_SOCK": "/canary/agent.sock",
    "PYTHONPATH": "/canary/pythonpath",
}

# The revision's whole code: an `llmp/cli.py` that reports what its process can see and
# reach, as the last line of its error output (which `llmp diff` shows).
SPY = """\
import json, os, socket, sys
port = int(open("port").read())
reached = []
try:
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    reached.append("create_connection")
except OSError:
    pass
s = socket.socket()
try:
    s.settimeout(2)
    s.connect(("127.0.0.1", port))
    reached.append("connect")
except OSError:
    pass
finally:
    s.close()
home = os.environ.get("HOME", "")
seen = {
    "env": dict(os.environ),
    "home_files": sorted(os.listdir(home)) if os.path.isdir(home) else None,
    "reached": reached,
}
print(json.dumps(seen), file=sys.stderr)
sys.exit(1)
"""


@pytest.fixture
def listener() -> Iterator[int]:
    """A local port that accepts connections: reaching it means the network was on."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()[1]
    server.close()


def spy_repo(root: Path, port: int) -> Path:
    (root / "llmp").mkdir(parents=True)
    (root / "llmp" / "__init__.py").write_text("")
    (root / "llmp" / "cli.py").write_text(SPY)
    (root / "stacks").mkdir()
    (root / "stacks" / "Pulumi.spy.yaml").write_text("config: {}\n")
    (root / "port").write_text(str(port))
    subprocess.run([*GIT, "-C", str(root), "init", "-q"], check=True)
    subprocess.run([*GIT, "-C", str(root), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(root), "commit", "-q", "-m", "spy"], check=True)
    return root


def what_the_revision_saw(root: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://proxy.canary.example:3128")
    monkeypatch.setenv("NO_PROXY", "*")
    head = revision.resolve("HEAD", root)
    with pytest.raises(RevisionError) as failed:
        revision.plan_of_revision(head, "spy", root)
    message = str(failed.value)
    assert message.startswith("synth of spy at HEAD"), message
    seen: dict[str, object] = json.loads(message.split(" failed: ", 1)[1])
    return seen


def test_a_base_revision_sees_no_credential_of_the_caller(
    tmp_path: Path, listener: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = what_the_revision_saw(spy_repo(tmp_path / "repo", listener), monkeypatch)
    env = seen["env"]
    assert isinstance(env, dict)
    leaked = {k: v for k, v in env.items() if v in SECRETS.values() or "canary" in v}
    assert leaked == {}
    assert not any(k.startswith(("AWS_ACCESS", "AWS_SECRET", "AWS_SESSION")) for k in env)
    assert not any(k.startswith(("GOOGLE_", "AZURE_", "GITHUB_")) for k in env)
    assert "PULUMI_ACCESS_TOKEN" not in env and "PULUMI_CONFIG_PASSPHRASE" not in env
    assert "AWS_PROFILE" not in env and "SSH_AUTH_SOCK" not in env
    # No credential file either: a HOME of its own, empty, that is not the caller's.
    assert env["HOME"] != str(Path.home())
    assert seen["home_files"] == []
    assert env["AWS_EC2_METADATA_DISABLED"] == "true"
    assert env["KUBECONFIG"].startswith(env["HOME"])


def test_a_base_revision_reaches_no_network(
    tmp_path: Path, listener: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = what_the_revision_saw(spy_repo(tmp_path / "repo", listener), monkeypatch)
    assert seen["reached"] == []
    env = seen["env"]
    assert isinstance(env, dict)
    # An SDK that bypasses the socket guard meets proxies that answer nothing.
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        assert env[name] == "http://127.0.0.1:9", name
    assert env["NO_PROXY"] == ""


def test_the_child_environment_is_an_allow_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOME_RANDOM_SECRET", "x")
    monkeypatch.setenv("LANG", "C.UTF-8")
    env = revision.tree_env(tmp_path)
    assert "SOME_RANDOM_SECRET" not in env
    assert env["LANG"] == "C.UTF-8"
    assert env["HOME"] == str(tmp_path)
    assert env["PATH"]
