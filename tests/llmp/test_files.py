"""`llmp.files`: the one way a command writes a file the user named."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from llmp import files
from llmp.files import FileRefused, replace_file, stack_of_file, write_file
from llmp.serving import promote as p
from llmp.stacks import REPO_ROOT

PRETRAIN = REPO_ROOT / "stacks" / "Pulumi.pretrain.yaml"


def test_a_new_file_is_written_with_the_umask_s_mode(tmp_path: Path) -> None:
    path = write_file(tmp_path / "sub" / "report.json", "{}\n", force=False, what="--output")
    assert path.read_text() == "{}\n"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    assert sorted(p.name for p in path.parent.iterdir()) == ["report.json"]  # no temp left


def test_an_existing_file_is_refused_without_force_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text("mine")
    with pytest.raises(FileRefused) as refused:
        write_file(path, "new", force=False, what="--output")
    assert str(refused.value) == (
        f"--output {path} exists; pass --force to overwrite it"
    )
    assert path.read_text() == "mine"
    path.chmod(0o640)
    write_file(path, "new", force=True, what="--output")
    assert path.read_text() == "new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # a replaced file keeps its mode


@pytest.mark.parametrize(
    "name", ["Pulumi.pretrain.yaml", "Pulumi.yaml", "Pulumi.other.yml", "renamed.yaml"]
)
def test_a_stack_file_is_never_written_even_with_force(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    shutil.copy(PRETRAIN, path)
    with pytest.raises(FileRefused, match="never overwritten, even with --force"):
        write_file(path, "{}", force=True, what="--output")
    assert path.read_text() == PRETRAIN.read_text()


def test_a_link_to_a_stack_file_is_a_stack_file(tmp_path: Path) -> None:
    link = tmp_path / "report.json"
    link.symlink_to(PRETRAIN)
    assert stack_of_file(link) == "pretrain"
    with pytest.raises(FileRefused, match="is pretrain's stack file"):
        write_file(link, "{}", force=True, what="--output")


def test_a_kubernetes_manifest_is_no_stack_file(tmp_path: Path) -> None:
    path = tmp_path / "configmap-x.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\ndata:\n  llm-platform: x\n")
    assert stack_of_file(path) is None
    assert stack_of_file(tmp_path / "Pulumi.pretrain-dr.yaml") == "pretrain-dr"


def test_the_own_stack_s_file_may_be_written_with_force(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.pretrain-dr.yaml"
    path.write_text("config: {}\n")
    write_file(path, "config: {x: 1}\n", force=True, what="--out", own_stack="pretrain-dr")
    assert path.read_text() == "config: {x: 1}\n"


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileRefused, match="a directory; name a file"):
        write_file(tmp_path, "x", force=True, what="--to")


def test_a_kill_before_the_rename_leaves_the_old_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "Pulumi.inference.yaml"
    path.write_text("old\n")

    def killed(src: str, dst: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        replace_file(path, "new\n", stack="inference")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # the temp file is gone


def test_promote_rewrites_the_stack_file_atomically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "Pulumi.inference.yaml"
    shutil.copy(REPO_ROOT / "stacks" / "Pulumi.inference.yaml", copy)
    t = p.target("inference", "llama-8b")
    target = p.Target(t.stack, copy, t.model, t.bucket, t.prefix, t.current)
    renamed: list[tuple[str, str]] = []
    real = os.replace

    def spy(src: str, dst: str) -> None:
        renamed.append((Path(src).parent.name, Path(dst).name))
        real(src, dst)

    monkeypatch.setattr(files.os, "replace", spy)
    p.change_revision(target, "llama-8b/20261201T120000Z-step-40", write=True)
    assert renamed == [(tmp_path.name, copy.name)]  # a temp file beside it, renamed over it
