"""DCGM diagnostics: prove every GPU of every node of a pool works before a job lands on it.

A node that joins the cluster with a GPU whose memory has faulty cells, whose PCIe
link trained at a lower width, or whose driver stack is half there, schedules pods
like any other; the first training step then fails, or one rank runs slow for days.
NVIDIA's DCGM diagnostics (`dcgmi diag`) exercise the hardware: level 1 checks the
software stack, level 2 adds the `pcie` and `memory` tests (about two minutes),
level 3 adds compute, power, stress and memory-bandwidth tests (about 15 minutes).
The levels, their tests and deadlines, and the pinned image are catalog data
(`dcgm_diagnostic`).

The job: an Indexed Job with one pod per usable (Ready, schedulable) node of the pool.
Each pod asks for all the node's GPUs, so no two land on one node (required pod
anti-affinity on the hostname says so too, for a node with spare GPUs), tolerates the
pool's accelerator taint, starts its own DCGM host engine on loopback and runs
`dcgmi diag -r LEVEL -j`.
`backoffLimitPerIndex: 0` with `maxFailedIndexes` equal to the node count keeps one
failing node from stopping the diagnostics of the others (a plain `backoffLimit: 0`
would end the whole Job at the first failed pod). The pods run as root, because the
host engine needs root for parts of the diagnostics (NVIDIA's nv-hostengine reference),
but not privileged and with every capability dropped: the GPUs come from the device
plugin, the host engine listens on loopback above port 1024, and its pid file, log and
the diagnostic's home go to a scratch `emptyDir` at /tmp under a read-only root file
system. Whether a level-3 plugin needs more inside a container (NVIDIA's cluster
readiness engine runs its level-4 diagnostic privileged) is not checked here: that needs
a GPU node, and so does whether a diagnostic beside the GPU operator's DCGM exporter on
the same GPUs behaves.

The output (`dcgmi diag -j`), as DCGM writes it (NVIDIA/DCGM dcgmi/Diag.cpp,
nvvs/include/NvvsJsonStrings.h, testing/python3/dcgm_diag_schema.json):

    {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
        {"name": "memory", "results": [{"entity_group": "GPU", "entity_group_id": 1,
         "entity_id": 3, "status": "Fail", "warnings": [{"warning": "...", "error_id": 52,
         "error_category": 10, "error_severity": 2}]}], "test_summary": {"status": "Fail"}}]}]},
     "entity_groups": [{"entity_group": "GPU", "entities": [{"entity_id": 0, ...}]}],
     "metadata": {"version": "4.6.0", "Driver Version Detected": "..."}}

DCGM 3 named the object "DCGM GPU Diagnostic" and each result's GPU `gpu_id`; nvvs's
own JSON used `gpu_ids` lists and upper-case statuses. All three are read. When
dcgmi cannot run the diagnostic at all it writes `{"DCGM Diagnostic":
{"runtime_error": "..."}}`.

The judge (`judge`), per node:

- **fail** when any result is `Fail`, when the output is not that JSON or is cut
  short, when dcgmi reports a runtime error, when a test of the level left no
  result, or when DCGM saw fewer GPUs than the instance type has (a GPU that fell
  off the bus is not tested, so it cannot fail a test);
- **warning** (the node still passes) for a `Warn` result, for a `Pass` that carries
  messages, and for a `Fail` whose every error DCGM rates `DCGM_ERROR_MONITOR`
  ("can perform workload, but needs to be monitored", dcgmlib/dcgm_errors.h) in a
  hardware or performance category: dcgmi's JSON prints warn-level results as `Fail`
  (`HelperDisplayDiagResult` without `DDR_DISPLAY_WARN`), and the severity is what
  tells a clock event under load from a broken GPU. A monitor-level error of a
  software or internal category (a CUDA or NVML call that failed, a field DCGM could
  not read) still fails: the test did not see the hardware;
- **skipped** results are counted and listed with their reason, and do not fail.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from manifests.jobs.pod import (
    JOB_NAME_LABEL,
    Affinity,
    Capabilities,
    Container,
    ContainerSecurityContext,
    EmptyDirSource,
    EnvVar,
    IndexedJob,
    IndexedJobSpec,
    LabelSelector,
    ObjectMeta,
    PodAffinityTerm,
    PodAntiAffinity,
    PodSecurityContext,
    PodSpec,
    PodTemplate,
    ResourceRequirements,
    Volume,
    VolumeMount,
    check_image,
    check_nvidia_job,
    node_placement,
)
from spec.catalog import DcgmDiagnostic, catalog

COMPONENT = "dcgm-diagnostic"
CONTAINER = "dcgm-diag"
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"
SCRATCH = "/tmp"
"""The host engine's pid and log files and the diagnostic's home (logs, stats)."""


def diagnostic_catalog() -> DcgmDiagnostic:
    entry = catalog().dcgm_diagnostic
    if entry is None:
        raise ValueError("the catalog has no dcgm_diagnostic section (image, levels)")
    return entry


class DcgmDiagSpec(BaseModel):
    """One diagnostic run over the Ready nodes of one GPU pool."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    instance_type: str
    node_pool: str
    namespace: str
    nodes: int = Field(ge=1, le=1000, description="Ready nodes of the pool: one pod each.")
    name: str = "dcgm-diag"
    level: int | None = Field(None, description="Default: the catalog's default_level.")
    image: str | None = Field(None, description="Default: the catalog's dcgm_diagnostic.image.")
    queue_name: str | None = None
    topology: dict[str, str] = Field(
        default_factory=dict,
        description="Kueue's Topology Aware Scheduling annotations of its pods: what a pod set on "
        "a topology-aware pool must carry (`kueue.x-k8s.io/podset-unconstrained-topology`).",
    )
    deadline_seconds: int | None = Field(
        None, ge=60, description="Default: the level's deadline_minutes from the catalog."
    )

    @property
    def run_level(self) -> int:
        return self.level if self.level is not None else diagnostic_catalog().default_level

    @property
    def pinned_image(self) -> str:
        return check_image(self.image or diagnostic_catalog().image)

    @property
    def gpus(self) -> int:
        return catalog().instance(self.instance_type).gpu_count

    @property
    def deadline(self) -> int:
        if self.deadline_seconds is not None:
            return self.deadline_seconds
        return diagnostic_catalog().levels[self.run_level].deadline_minutes * 60


def _check(spec: DcgmDiagSpec) -> None:
    check_nvidia_job(
        spec.name,
        spec.namespace,
        spec.queue_name,
        spec.instance_type,
        "DCGM diagnostics run on NVIDIA GPU instances",
    )
    levels = diagnostic_catalog().levels
    if spec.run_level not in levels:
        raise ValueError(
            f"DCGM level {spec.run_level} is not in the catalog; use one of "
            f"{', '.join(str(level) for level in sorted(levels))}"
        )
    spec.pinned_image  # noqa: B018 - raises on an unpinned image


def diag_script(level: int) -> str:
    """Start a host engine private to the pod (loopback, its default), then run the suite.

    `exec` makes dcgmi's exit status the container's, so a failed test shows as a failed
    pod too; the verdict still comes from the JSON, which names the test and the GPU.
    """
    engine = [
        "nv-hostengine",
        "--pid", f"{SCRATCH}/nv-hostengine.pid",
        "--log-filename", f"{SCRATCH}/nv-hostengine.log",
        "--home-dir", f"{SCRATCH}/dcgm-diag",
    ]  # fmt: skip
    return "\n".join(
        [
            "set -uo pipefail",
            f"mkdir -p {SCRATCH}/dcgm-diag",
            # Its start-up banner goes to the log, not into the JSON on stdout.
            f"{shlex.join(engine)} >/dev/null 2>&1 || {{ echo 'nv-hostengine did not start' >&2; "
            f"cat {SCRATCH}/nv-hostengine.log >&2; exit 70; }}",
            "for i in $(seq 30); do dcgmi discovery -l >/dev/null 2>&1 && break; sleep 2; done",
            f"exec dcgmi diag -r {int(level)} -j",
        ]
    )


def dcgm_diag_manifests(spec: DcgmDiagSpec) -> list[dict[str, Any]]:
    """The Indexed Job of one diagnostic run (a list, like `fabric_manifests`)."""
    _check(spec)
    kind = catalog().accelerator_kind(spec.instance_type)
    assert kind is not None
    node_affinity, tolerations = node_placement(spec.instance_type, spec.node_pool)
    one_per_node = PodAntiAffinity(
        required_during_scheduling_ignored_during_execution=[
            PodAffinityTerm(
                label_selector=LabelSelector(match_labels={JOB_NAME_LABEL: spec.name}),
                topology_key=HOSTNAME_TOPOLOGY,
            )
        ]
    )
    # The GPUs are the test; host CPU and memory only drive it.
    limits = {kind.resource: str(spec.gpus), "cpu": "8", "memory": "32Gi"}
    container = Container(
        name=CONTAINER,
        image=spec.pinned_image,
        image_pull_policy="Always",
        command=["/bin/bash", "-c", diag_script(spec.run_level)],
        # CUDA's kernel cache goes under $HOME: keep it on the scratch volume.
        env=[EnvVar(name="HOME", value=SCRATCH)],
        resources=ResourceRequirements(limits=dict(limits), requests=dict(limits)),
        volume_mounts=[VolumeMount(name="scratch", mount_path=SCRATCH)],
        security_context=ContainerSecurityContext(
            allow_privilege_escalation=False,
            capabilities=Capabilities(drop=["ALL"]),
            read_only_root_filesystem=True,
        ),
    )
    labels = {JOB_NAME_LABEL: spec.name, "app.kubernetes.io/component": COMPONENT}
    job_labels = {
        "app.kubernetes.io/part-of": "llm-platform",
        "app.kubernetes.io/component": COMPONENT,
    }
    if spec.queue_name:
        job_labels["kueue.x-k8s.io/queue-name"] = spec.queue_name
    job = IndexedJob(
        metadata=ObjectMeta(name=spec.name, namespace=spec.namespace, labels=job_labels),
        spec=IndexedJobSpec(
            completions=spec.nodes,
            parallelism=spec.nodes,
            backoff_limit_per_index=0,
            max_failed_indexes=spec.nodes,
            active_deadline_seconds=spec.deadline,
            ttl_seconds_after_finished=24 * 3600,
            suspend=True if spec.queue_name else None,
            template=PodTemplate(
                metadata=ObjectMeta(labels=labels, annotations=dict(spec.topology) or None),
                spec=PodSpec(
                    service_account_name="default",
                    # The diagnostic never talks to the API server.
                    automount_service_account_token=False,
                    priority_class_name="llmp-training",
                    restart_policy="Never",
                    affinity=Affinity(
                        node_affinity=node_affinity.node_affinity, pod_anti_affinity=one_per_node
                    ),
                    tolerations=tolerations,
                    security_context=PodSecurityContext(),
                    containers=[container],
                    volumes=[
                        Volume(name="scratch", empty_dir=EmptyDirSource(size_limit="2Gi")),
                    ],
                ),
            ),
        ),
    )
    return [job.to_json()]


# --- reading the output ----------------------------------------------------------------

Outcome = Literal["pass", "fail", "warn", "skip", "not run", "unknown"]
_OUTCOMES: dict[str, Outcome] = {
    "pass": "pass",
    "fail": "fail",
    "warn": "warn",
    "skip": "skip",
    "not run": "not run",
}
ROOT_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")
"""DCGM 4 and DCGM 3 names of the diagnostic's JSON object."""
DCGM_ERROR_MONITOR = 1
"""dcgm_errors.h: "Can perform workload, but needs to be monitored"."""
CONDITION_CATEGORIES = frozenset({1, 2, *range(9, 16)})
"""dcgm_errors.h dcgmErrorCategory_t: PERF_THRESHOLD, PERF_VIOLATION and HARDWARE_THERMAL ...
HARDWARE_OTHER. The others (software, internal) say a test could not look."""


class DiagOutputError(ValueError):
    """The text is not (or not all of) the JSON `dcgmi diag -j` writes."""


@dataclass(frozen=True)
class DiagError:
    """One entry of a result's `warnings` list: DCGM's error with its code and rating."""

    message: str
    error_id: int | None = None
    category: int | None = None
    severity: int | None = None

    def describe(self) -> str:
        return f"{self.message} (DCGM error {self.error_id})" if self.error_id else self.message


@dataclass(frozen=True)
class DiagResult:
    category: str
    test: str
    entity: str
    """"GPU 3", "CPU 0", or "all" for a test's summary."""
    gpu: int | None
    status: Outcome
    raw_status: str
    errors: tuple[DiagError, ...] = ()
    info: tuple[str, ...] = ()

    @property
    def monitor_only(self) -> bool:
        """Every error is a monitor-level hardware or performance condition."""
        return bool(self.errors) and all(
            e.severity == DCGM_ERROR_MONITOR and e.category in CONDITION_CATEGORIES
            for e in self.errors
        )


@dataclass(frozen=True)
class DiagRun:
    version: str | None
    driver: str | None
    gpus: frozenset[int]
    results: tuple[DiagResult, ...]
    summaries: tuple[DiagResult, ...]
    runtime_error: str | None = None

    @property
    def tests(self) -> list[str]:
        return sorted({r.test for r in (*self.results, *self.summaries)})


def _json_object(text: str) -> Any:
    """The JSON document in a pod's log, with any banner line before or after it cut off
    (what NVIDIA's own tests do: from the first '{' to the last '}')."""
    stripped = text.strip()
    if not stripped:
        raise DiagOutputError("the log is empty")
    try:
        return json.loads(stripped)
    except json.JSONDecodeError as whole:
        start, end = stripped.find("{"), stripped.rfind("}")
        if start < 0 or end <= start:
            first = stripped.splitlines()[0][:120]
            raise DiagOutputError(f"no JSON object in the log (it starts {first!r})") from None
        try:
            return json.loads(stripped[start : end + 1])
        except json.JSONDecodeError as exc:
            reason = whole if start == 0 else exc
            raise DiagOutputError(
                f"the JSON is cut short or broken (line {reason.lineno}, column {reason.colno}: "
                f"{reason.msg})"
            ) from None


def _expect(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        names = {dict: "an object", list: "a list", str: "a string", int: "a number"}
        expected = names.get(kind, str(kind)) if isinstance(kind, type) else "a string or number"
        raise DiagOutputError(f"{where} is {json.dumps(value)[:60]}, not {expected}")
    return value


def _optional_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _errors(raw: Any, where: str) -> tuple[DiagError, ...]:
    if raw is None:
        return ()
    out = []
    for i, item in enumerate(_expect(raw, list, where)):
        if isinstance(item, str):  # DCGM 3 wrote bare messages in places
            out.append(DiagError(item))
            continue
        entry = _expect(item, dict, f"{where}[{i}]")
        message = entry.get("warning", entry.get("warnings", ""))
        out.append(
            DiagError(
                message=str(message),
                error_id=_optional_int(entry.get("error_id")),
                category=_optional_int(entry.get("error_category")),
                severity=_optional_int(entry.get("error_severity")),
            )
        )
    return tuple(out)


def _info(raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    return tuple(str(i) for i in raw) if isinstance(raw, list) else (str(raw),)


def _entities(result: Mapping[str, Any], where: str) -> Iterator[tuple[str, int | None]]:
    """The entities one result is about: DCGM 4's entity_group/entity_id, DCGM 3's gpu_id,
    nvvs's comma-separated gpu_ids; none of them for a test's summary."""
    if "entity_id" in result:
        group = str(result.get("entity_group", "GPU"))
        entity_id = _expect(result["entity_id"], int, f"{where}.entity_id")
        yield f"{group} {entity_id}", entity_id if group == "GPU" else None
        return
    ids = result.get("gpu_id", result.get("gpu_ids"))
    if ids is None:
        yield "all", None
        return
    for token in str(_expect(ids, (str, int), f"{where}.gpu_id")).split(","):
        if not token.strip().isdigit():
            raise DiagOutputError(f"{where}.gpu_id {ids!r} is not a GPU index")
        yield f"GPU {int(token)}", int(token)


def _result(category: str, test: str, raw: Any, where: str) -> Iterator[DiagResult]:
    result = _expect(raw, dict, where)
    status_text = _expect(result.get("status"), str, f"{where}.status")
    status = _OUTCOMES.get(status_text.strip().lower(), "unknown")
    errors = _errors(result.get("warnings"), f"{where}.warnings")
    info = _info(result.get("info"))
    for entity, gpu in _entities(result, where):
        yield DiagResult(category, test, entity, gpu, status, status_text, errors, info)


def parse(text: str) -> DiagRun:
    """Read `dcgmi diag -j` output (DCGM 3 or 4) from a pod's log; DiagOutputError if it is not."""
    doc = _expect(_json_object(text), dict, "the JSON document")
    root_key = next((k for k in ROOT_KEYS if k in doc), None)
    if root_key is None:
        keys = ", ".join(sorted(doc)[:5]) or "none"
        raise DiagOutputError(f"no 'DCGM Diagnostic' object (top-level keys: {keys})")
    diag = _expect(doc[root_key], dict, root_key)
    metadata = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    version = metadata.get("version") or diag.get("version") or doc.get("version")
    driver = metadata.get("Driver Version Detected") or doc.get("Driver Version Detected")
    if diag.get("runtime_error"):
        return DiagRun(
            version=str(version) if version else None,
            driver=str(driver) if driver else None,
            gpus=frozenset(),
            results=(),
            summaries=(),
            runtime_error=str(diag["runtime_error"]),
        )
    categories = _expect(diag.get("test_categories"), list, f"{root_key}.test_categories")
    results: list[DiagResult] = []
    summaries: list[DiagResult] = []
    for c, raw_category in enumerate(categories):
        where = f"test_categories[{c}]"
        category = _expect(raw_category, dict, where)
        name = str(category.get("category", ""))
        for t, raw_test in enumerate(_expect(category.get("tests"), list, f"{where}.tests")):
            at = f"{where}.tests[{t}]"
            test = _expect(raw_test, dict, at)
            test_name = _expect(test.get("name"), str, f"{at}.name")
            for r, raw_result in enumerate(_expect(test.get("results", []), list, f"{at}.results")):
                results.extend(_result(name, test_name, raw_result, f"{at}.results[{r}]"))
            if "test_summary" in test:
                summaries.extend(
                    _result(name, test_name, test["test_summary"], f"{at}.test_summary")
                )
    return DiagRun(
        version=str(version) if version else None,
        driver=str(driver) if driver else None,
        gpus=_gpus(doc, results),
        results=tuple(results),
        summaries=tuple(summaries),
    )


def _gpus(doc: Mapping[str, Any], results: list[DiagResult]) -> frozenset[int]:
    """The GPUs DCGM enumerated (DCGM 4's entity_groups), else those the results name."""
    for group in doc.get("entity_groups") or []:
        if isinstance(group, dict) and group.get("entity_group") == "GPU":
            return frozenset(
                e["entity_id"]
                for e in group.get("entities") or []
                if isinstance(e, dict) and _optional_int(e.get("entity_id")) is not None
            )
    serials = doc.get("GPU Device Serials")  # DCGM 3: {"0": "serial", ...}
    if isinstance(serials, dict) and all(str(k).isdigit() for k in serials):
        return frozenset(int(k) for k in serials)
    return frozenset(r.gpu for r in results if r.gpu is not None)


# --- the verdict -----------------------------------------------------------------------


@dataclass(frozen=True)
class NodeVerdict:
    node: str
    instance_type: str
    level: int
    gpus_expected: int
    run: DiagRun | None
    failures: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        """One line: the verdict, the node, what ran, and every reason, failures first."""
        head = "PASS" if self.passed else "FAIL"
        return f"{head} {self.node} ({self.instance_type}, level {self.level}): {self.detail()}"

    def detail(self) -> str:
        """What ran on how many GPUs, then the failures, warnings and skips (counted)."""
        if self.run is None or self.run.runtime_error:
            return "; ".join(self.failures)
        tests = ", ".join(self.run.tests) or "no test"
        clean = not (self.failures or self.warnings or self.skipped)
        parts = [
            f"{tests} {'passed' if clean else 'ran'} on {len(self.run.gpus)}/"
            f"{self.gpus_expected} GPUs"
        ]
        parts.extend(self.failures)
        if self.warnings:
            parts.append(f"{_count(len(self.warnings), 'warning')}: {'; '.join(self.warnings)}")
        if self.skipped:
            parts.append(f"{len(self.skipped)} skipped: {'; '.join(self.skipped)}")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "instance_type": self.instance_type,
            "level": self.level,
            "passed": self.passed,
            "dcgm_version": self.run.version if self.run else None,
            "driver": self.run.driver if self.run else None,
            "gpus_seen": len(self.run.gpus) if self.run else 0,
            "gpus_expected": self.gpus_expected,
            "tests": self.run.tests if self.run else [],
            "failures": list(self.failures),
            "warnings": list(self.warnings),
            "skipped": list(self.skipped),
        }


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _why(result: DiagResult) -> str:
    messages = [e.describe() for e in result.errors] or list(result.info)
    return f": {' / '.join(messages)}" if messages else ""


@dataclass
class _Findings:
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def _judge_results(run: DiagRun) -> _Findings:
    found = _Findings()
    judged_tests: set[str] = set()
    for r in run.results:
        subject = f"{r.test} on {r.entity}"
        if r.status == "fail" and r.monitor_only:
            found.warnings.append(f"{subject} (monitor-level){_why(r)}")
        elif r.status == "fail":
            found.failures.append(f"{subject} failed{_why(r)}")
        elif r.status == "unknown":
            found.failures.append(f"{subject}: status {r.raw_status!r} is not Pass/Fail/Warn/Skip")
        elif r.status == "warn" or (r.status == "pass" and r.errors):
            found.warnings.append(f"{subject}{_why(r)}")
        elif r.status == "skip":
            found.skipped.append(f"{subject} skipped{_why(r)}")
        if r.status in ("fail", "warn", "unknown"):
            judged_tests.add(r.test)
    for s in run.summaries:
        # A summary that fails with no entity result saying why: an error of the whole test.
        if s.status in ("fail", "unknown") and s.test not in judged_tests:
            if s.status == "fail" and s.monitor_only:
                found.warnings.append(f"{s.test} (monitor-level){_why(s)}")
            else:
                found.failures.append(f"{s.test} failed{_why(s)}")
    return found


def judge(text: str, instance_type: str, level: int | None = None, node: str = "") -> NodeVerdict:
    """The verdict on one node's `dcgmi diag -j` log, against the catalog's level and the
    instance type's GPU count."""
    entry = diagnostic_catalog()
    level = entry.default_level if level is None else level
    if level not in entry.levels:
        raise ValueError(f"DCGM level {level} is not in the catalog")
    expected = catalog().instance(instance_type).gpu_count
    node = node or "node"
    try:
        run = parse(text)
    except DiagOutputError as exc:
        return NodeVerdict(
            node, instance_type, level, expected, None,
            failures=(f"not dcgmi diag JSON: {exc}",),
        )  # fmt: skip
    if run.runtime_error:
        return NodeVerdict(
            node, instance_type, level, expected, run,
            failures=(f"dcgmi diag did not run: {run.runtime_error}",),
        )  # fmt: skip
    found = _judge_results(run)
    missing = [t for t in entry.levels[level].tests if t not in run.tests]
    if missing:
        found.failures.append(
            f"no result for {', '.join(missing)} (level {level} runs "
            f"{', '.join(entry.levels[level].tests)})"
        )
    if len(run.gpus) < expected:
        seen = ", ".join(str(g) for g in sorted(run.gpus)) or "none"
        found.failures.append(
            f"DCGM saw {len(run.gpus)} GPUs ({seen}); {instance_type} has {expected}"
        )
    return NodeVerdict(
        node,
        instance_type,
        level,
        expected,
        run,
        failures=tuple(found.failures),
        warnings=tuple(found.warnings),
        skipped=tuple(found.skipped),
    )
