"""Fabric acceptance: the 2-node nccl-tests job, and the verdict read from its output.

The two logs under data/ were written for these tests in the shape nccl-tests
v2.16 prints under `mpirun --tag-output` with NCCL_DEBUG=INFO (numbers are
made up, consistent with busbw = algbw x 2(n-1)/n for 16 ranks): one run over
EFA (aws-ofi-nccl), one where NCCL fell back to TCP sockets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from manifests.jobs.fabric import FabricSpec, evaluate, fabric_manifests, hosts, parse
from spec.catalog import catalog
from tests.manifests.jobs.k8s import as_pod, policy_violations, validate

DATA = Path(__file__).with_name("data")
EFA_LOG = (DATA / "all_reduce_p5_efa.log").read_text()
SOCKET_LOG = (DATA / "all_reduce_p5_socket.log").read_text()


def test_efa_run_passes_with_peak_and_average() -> None:
    verdict = evaluate(EFA_LOG, "p5.48xlarge")
    assert verdict.passed, verdict.summary()
    run = verdict.run
    assert run.transport == "efa" and run.providers == ["efa"]
    assert len(run.rows) == 32  # 8 B to 16 GiB, factor 2
    assert run.peak_busbw_gbps == 490.80 and run.peak.size_bytes == 16 * 2**30
    assert run.avg_busbw_gbps == pytest.approx(162.3231)
    assert run.out_of_bounds == 0
    assert (
        verdict.threshold_gbps
        == catalog().fabric_acceptance.thresholds["p5.48xlarge"].min_peak_busbw_gbps
    )
    assert verdict.summary().startswith("PASS p5.48xlarge: transport efa, peak busbw 490.8 GB/s")


def test_socket_fallback_fails_and_says_why() -> None:
    verdict = evaluate(SOCKET_LOG, "p5.48xlarge")
    assert not verdict.passed
    assert verdict.run.transport == "socket"
    assert verdict.run.peak_busbw_gbps == 21.56
    assert any("fell back to TCP sockets" in r for r in verdict.reasons)
    assert any("below 390" in r for r in verdict.reasons)
    assert "\n" not in verdict.summary()


def test_efa_at_full_speed_still_fails_if_one_rank_used_sockets() -> None:
    mixed = EFA_LOG.replace(
        "[3] NCCL INFO Using network Libfabric", "[3] NCCL INFO Using network Socket"
    )
    assert evaluate(mixed, "p5.48xlarge").run.transport == "socket"
    assert not evaluate(mixed, "p5.48xlarge").passed


def test_thresholds_are_per_instance_type() -> None:
    # The same output cut at 16 MiB (peak about 200 GB/s) passes p4d's bar, fails p5's.
    def small(line: str) -> bool:
        tokens = line.split(":", 1)[-1].split()
        return not (len(tokens) == 13 and tokens[0].isdigit() and int(tokens[0]) > 2**24)

    cut = "\n".join(line for line in EFA_LOG.splitlines() if small(line))
    assert 62 < parse(cut).peak_busbw_gbps < 390
    assert evaluate(cut, "p4d.24xlarge").passed
    assert not evaluate(cut, "p5.48xlarge").passed


def test_wrong_values_fail() -> None:
    bad = EFA_LOG.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 4 FAILED")
    verdict = evaluate(bad, "p5.48xlarge")
    assert not verdict.passed and any("4 wrong" in r for r in verdict.reasons)


def test_without_nccl_debug_the_transport_is_unknown_and_fails() -> None:
    quiet = "\n".join(line for line in EFA_LOG.splitlines() if "NCCL INFO" not in line)
    verdict = evaluate(quiet, "p5.48xlarge")
    assert verdict.run.transport == "unknown" and not verdict.passed


def test_older_twelve_column_output_without_prefix() -> None:
    text = """
#   size      count  type redop  time  algbw  busbw  error   time  algbw  busbw  error
#    (B) (elements)              (us) (GB/s) (GB/s)          (us) (GB/s) (GB/s)
1073741824 268435456 float sum 14000  76.70 143.81  5e-07  14010  76.64 143.70  5e-07
2147483648 536870912 float sum 27000  79.54 149.13  5e-07  27020  79.48 149.02  5e-07
x:1:1 [0] NCCL INFO Using network AWS Libfabric
"""
    run = parse(text)
    assert run.transport == "efa" and len(run.rows) == 2
    assert run.peak_busbw_gbps == 149.13
    assert run.avg_busbw_gbps == pytest.approx((143.81 + 149.13) / 2)


def test_no_rows_is_an_error() -> None:
    with pytest.raises(ValueError, match="no nccl-tests result rows"):
        parse("mpirun: command not found\n")


def test_every_catalog_threshold_names_a_source_and_an_efa_instance() -> None:
    fabric = catalog().fabric_acceptance
    assert set(fabric.thresholds) >= {
        "p5.48xlarge",
        "p5en.48xlarge",
        "p4d.24xlarge",
        "p4de.24xlarge",
        "p6-b200.48xlarge",
    }
    for name, threshold in fabric.thresholds.items():
        itype = catalog().instance(name)
        assert itype.efa_interfaces > 0 and threshold.source
        # Never above the line rate x 1.25 (the best 2-node p5 result reaches 1.22x).
        assert threshold.min_peak_busbw_gbps <= itype.network_gbps / 8 * 1.25


def _manifests(**overrides: Any) -> list[dict[str, Any]]:
    fields = {"instance_type": "p5.48xlarge", "node_pool": "p5", "namespace": "training"}
    return fabric_manifests(FabricSpec.model_validate({**fields, **overrides}))


def test_job_and_service_validate_and_pass_the_policy_pack() -> None:
    service, job = _manifests()
    validate(service)
    validate(job)
    validate(as_pod(job["spec"]["template"]))
    assert policy_violations(job, "kubernetes:batch/v1:Job") == []


def test_job_shape_hostfile_free_launch() -> None:
    service, job = _manifests()
    assert service["spec"]["clusterIP"] == "None"
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 2, 2)
    assert spec["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"] == "fabric-acceptance"
    (c,) = pod["containers"]
    assert c["image"] == catalog().fabric_acceptance.image
    script = c["command"][2]
    assert "-np 16 -N 8" in script
    assert (
        "--host fabric-acceptance-0.fabric-acceptance:8,fabric-acceptance-1.fabric-acceptance:8"
        in script
    )
    assert "all_reduce_perf -b 8 -e 16G" in script
    assert "FI_PROVIDER" not in script and "FI_EFA_USE_DEVICE_RDMA" not in script
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_SOCKET_IFNAME"] == "^lo"
    assert c["resources"]["limits"]["vpc.amazonaws.com/efa"] == "32"
    assert c["securityContext"]["privileged"] is False
    assert (
        hosts(FabricSpec(instance_type="p5.48xlarge", node_pool="p5", namespace="t", nodes=3))[-1]
        == "fabric-acceptance-2.fabric-acceptance"
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"instance_type": "g6e.12xlarge"}, "has no EFA interfaces"),
        ({"instance_type": "trn1.32xlarge"}, "runs NCCL on NVIDIA instances"),
        ({"instance_type": "g6e.48xlarge"}, "has no fabric_acceptance threshold"),
        ({"image": "public.ecr.aws/hpc-cloud/nccl-tests:latest"}, "uses the latest tag"),
    ],
)
def test_bad_fabric_specs(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _manifests(**overrides)
