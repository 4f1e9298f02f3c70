"""FSx for Lustre rules."""

from __future__ import annotations

import pytest

from tests.policies.conftest import hits, inputs, names, res

FS = "lustre-fs"
FS_TYPE = "aws:fsx/lustreFileSystem:LustreFileSystem"


@pytest.mark.parametrize("stack", ["pretrain", "finetune"])
@pytest.mark.parametrize(
    "rule", ["fsx-persistent-2", "fsx-kms-key", "fsx-backups", "fsx-linked-no-backups"]
)
def test_fsx_rule_is_quiet_on_the_stacks(plan, stack: str, rule: str) -> None:
    assert hits(plan(stack), rule) == []


def test_persistent_2_fires_on_scratch(plan) -> None:
    p = plan()
    inputs(p, FS, FS_TYPE)["deploymentType"] = "SCRATCH_2"
    assert names(hits(p, "fsx-persistent-2")) == {FS}


def test_kms_key_fires_without_a_key(plan) -> None:
    p = plan()
    del inputs(p, FS, FS_TYPE)["kmsKeyId"]
    assert names(hits(p, "fsx-kms-key")) == {FS}


def test_a_linked_file_system_that_asks_for_backups_is_refused(plan) -> None:
    p = plan()
    inputs(p, FS, FS_TYPE)["automaticBackupRetentionDays"] = 7
    inputs(p, FS, FS_TYPE)["skipFinalBackup"] = False
    found = hits(p, "fsx-linked-no-backups")
    assert len(found) == 2 and names(found) == {FS}
    assert hits(p, "fsx-backups") == []  # linked: backups are not what keeps its data


def test_an_unlinked_file_system_must_keep_backups(plan) -> None:
    p = plan()
    dra = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
    p.resources = [r for r in p.resources if r.type != dra]
    p.__dict__.pop("by_urn", None)
    found = hits(p, "fsx-backups")
    assert len(found) == 2 and names(found) == {FS}
    assert hits(p, "fsx-linked-no-backups") == []


def _move_fs_to(p: dict, zone: str) -> None:
    fs = res(p, FS, FS_TYPE)
    subnet = res(p, f"network-private-{zone}", "aws:ec2/subnet:Subnet").urn
    fs.dependencies = [d for d in fs.dependencies if "Subnet::" not in d] + [subnet]
    fs.inputs["subnetIds"] = f"network-private-{zone}-id"


@pytest.mark.parametrize("config", [None, {"fsx-in-gpu-pool-az": {"node-pool": "h100"}}])
def test_pool_az_is_quiet_when_beside_its_pool(plan, config) -> None:
    assert hits(plan(), "fsx-in-gpu-pool-az", config) == []


def test_pool_az_fires_when_the_file_system_moves_away(plan) -> None:
    p = plan()
    _move_fs_to(p, "us-east-1b")
    config = {"fsx-in-gpu-pool-az": {"node-pool": "h100"}}
    found = hits(p, "fsx-in-gpu-pool-az", config)
    assert names(found) == {FS}
    assert "us-east-1b" in found[0].message and "us-east-1a" in found[0].message
    # Without a configured pool: no accelerated node group runs in us-east-1b either.
    assert names(hits(p, "fsx-in-gpu-pool-az")) == {FS}


def test_pool_az_compares_with_the_configured_pool(plan) -> None:
    p = plan("finetune")  # FSx beside h100 (us-west-2a); a100-spot runs in us-west-2b
    assert hits(p, "fsx-in-gpu-pool-az", {"fsx-in-gpu-pool-az": {"node-pool": "h100"}}) == []
    found = hits(p, "fsx-in-gpu-pool-az", {"fsx-in-gpu-pool-az": {"node-pool": "a100-spot"}})
    assert names(found) == {FS}
    found = hits(p, "fsx-in-gpu-pool-az", {"fsx-in-gpu-pool-az": {"node-pool": "nope"}})
    assert "no node group is labelled" in found[0].message


FEEDS = "fsx-feeds-gpus"
PRETRAIN_DEMAND = {
    "tokens_per_second_per_gpu": 942,
    "bytes_per_token": 4,
    "prefetch_factor": 2,
    "checkpoint_gb": 980,
    "write_minutes": 10,
}


def feeds(demand: dict[str, float]) -> dict[str, dict[str, object]]:
    return {FEEDS: {"node-pool": "h100", "demand": demand}}


def test_feeds_gpus_passes_pretrains_70b_job_and_needs_a_demand(plan) -> None:
    p = plan()
    assert hits(p, FEEDS, feeds(PRETRAIN_DEMAND)) == []
    assert hits(p, FEEDS) == []  # no demand configured: nothing to check


def test_feeds_gpus_refuses_a_file_system_shrunk_below_the_checkpoints_need(plan) -> None:
    """At 125 MB/s/TiB the 48,000 GiB file system writes 5.9 GB/s: 980 GB takes 2.8 min."""
    p = plan()
    inputs(p, FS, FS_TYPE)["perUnitStorageThroughput"] = 125
    found = hits(p, FEEDS, feeds({**PRETRAIN_DEMAND, "write_minutes": 2}))
    assert [v.level for v in found] == ["mandatory"] and names(found) == {FS}
    assert found[0].message.startswith(f"{FS}: a 980 GB checkpoint takes 2.8 min to write")


def test_feeds_gpus_reads_the_client_path_from_efa_enabled(plan) -> None:
    """A loader of 20 MB per GPU per second: 320 MB/s per node over 4 nodes. A 1200 GiB file
    system at 1000 MB/s/TiB: one server, so 625 MB/s per ENA client, 293 MB/s each of 4."""
    p = plan()
    fs = inputs(p, FS, FS_TYPE)
    fs["storageCapacity"], fs["perUnitStorageThroughput"] = 1200, 1000
    demand = {**PRETRAIN_DEMAND, "bytes_per_token": 10_000, "tokens_per_second_per_gpu": 2000}
    found = hits(p, FEEDS, feeds({**demand, "nodes": 4, "checkpoint_gb": 0}))
    assert [v.message for v in found] == [
        f"{FS}: reading needs 320 MB/s per node but FSx delivers 293 MB/s to each of 4 nodes; "
        "raise the capacity or throughput_per_tib, or set efa"
    ]
    assert hits(p, FEEDS, feeds({**demand, "nodes": 3, "checkpoint_gb": 0})) == []


def test_feeds_gpus_names_a_demand_config_it_cannot_read(plan) -> None:
    found = hits(plan(), FEEDS, feeds({**PRETRAIN_DEMAND, "checkpoint_gb": "a lot", "gpus": 8}))
    assert [v.message for v in found] == [
        "demand config: unknown keys gpus; it takes tokens_per_second_per_gpu, bytes_per_token, "
        "prefetch_factor, checkpoint_gb, write_minutes, nodes",
        "demand config: checkpoint_gb must be numbers, 0 or more",
    ]
