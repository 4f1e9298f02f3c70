"""llmp/plan/revision.py: a revision is synthesized by its own code, in a worktree always removed.

Each test works in a git repository made under tmp_path from the project's
files; the project's own checkout is only read (`git ls-files`).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import spec
from llmp.diff import build_report
from llmp.plan import revision
from llmp.plan.revision import RevisionError, StackMissing
from llmp.stacks import REPO_ROOT

GIT_IDENTITY = ["-c", "user.name=llmp tests", "-c", "user.email=tests@example.invalid"]
REVISION_PRICE = 77.77
"""The p5.48xlarge price committed in the test repository: neither the checkout's nor a default."""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *GIT_IDENTITY, *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return done.stdout


def copy_project(dest: Path) -> Path:
    """The project's files (tracked and untracked, not ignored) copied to `dest`."""
    listed = git(REPO_ROOT, "ls-files", "-co", "--exclude-standard", "-z").split("\0")
    for name in filter(None, listed):
        source = REPO_ROOT / name
        if source.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
    return dest


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def set_p5_price(repo: Path, price: float) -> None:
    catalog = repo / "spec" / "catalog.yaml"
    text = catalog.read_text()
    assert "on_demand_usd_per_hour: 55.04" in text
    catalog.write_text(
        text.replace("on_demand_usd_per_hour: 55.04", f"on_demand_usd_per_hour: {price}", 1)
    )


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository whose one commit prices p5 at REVISION_PRICE (its working tree the same)."""
    root = copy_project(tmp_path_factory.mktemp("revision-repo"))
    set_p5_price(root, REVISION_PRICE)
    git(root, "init", "-q")
    commit_all(root, "base")
    return root


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """tempfile's directory for this test alone, so leftovers can be seen."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    yield tmp


def worktrees(repo: Path) -> list[str]:
    return [
        line.split(" ", 1)[1]
        for line in git(repo, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]


def test_the_checkout_under_test_is_the_one_importing_spec() -> None:
    # What the next test rules out is only meaningful if this process imports the checkout.
    assert Path(spec.__file__).resolve().is_relative_to(REPO_ROOT.resolve())


def test_a_worktree_imports_its_own_packages_not_the_editable_install(repo: Path) -> None:
    head = revision.resolve("HEAD", repo)
    with revision.checked_out(repo, head) as tree:
        origins = revision.import_origins(tree)
    assert {"spec", "program", "components", "workloads", "llmp", "policies"} <= set(origins)
    for name, origin in origins.items():
        assert origin is not None, name
        assert Path(origin).is_relative_to(tree.resolve()), (name, origin)
        assert not Path(origin).is_relative_to(REPO_ROOT.resolve()), (name, origin)


def test_plan_at_runs_the_revision_s_catalog_and_removes_the_worktree(
    repo: Path, private_tmp: Path
) -> None:
    plan = revision.plan_at("HEAD", "pretrain", repo)
    pool = plan.outputs["cost"]["node_pools"]["h100"]
    # The committed catalog's price: neither the checkout's 55.04 nor this process's catalog.
    assert pool["usd_per_instance_hour"] == REVISION_PRICE
    assert worktrees(repo) == [str(repo)]
    assert list(private_tmp.iterdir()) == []


def test_the_worktree_is_removed_when_interrupted(repo: Path, private_tmp: Path) -> None:
    head = revision.resolve("HEAD", repo)
    seen: list[Path] = []
    with pytest.raises(KeyboardInterrupt), revision.checked_out(repo, head) as tree:
        seen.append(tree)
        assert (tree / "spec" / "catalog.yaml").is_file()
        raise KeyboardInterrupt
    assert not seen[0].exists()
    assert worktrees(repo) == [str(repo)]
    assert list(private_tmp.iterdir()) == []


def test_an_unknown_revision_is_one_line_bad_input(repo: Path) -> None:
    with pytest.raises(RevisionError) as caught:
        revision.plan_at("no-such-branch", "pretrain", repo)
    message = str(caught.value)
    assert caught.value.exit_code == 2
    assert "\n" not in message
    assert message.startswith("unknown revision 'no-such-branch'")


def test_a_directory_outside_git_is_one_line_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # git must not find a repository above tmp_path (a TMPDIR inside a checkout, say).
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    with pytest.raises(RevisionError) as caught:
        revision.resolve("HEAD", tmp_path)
    assert caught.value.exit_code == 2
    assert "is not in a git repository" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_stack_the_revision_lacks_is_reported_as_added(repo: Path) -> None:
    sha = git(repo, "rev-parse", "HEAD").strip()
    with pytest.raises(StackMissing) as caught:
        revision.plan_at("HEAD", "scratch", repo)
    assert str(caught.value) == f"stack scratch does not exist at HEAD ({sha[:7]})"
    assert worktrees(repo) == [str(repo)]


def test_a_revision_that_fails_to_synthesize_shows_its_last_error_line(repo: Path) -> None:
    stack = repo / "stacks" / "Pulumi.pretrain.yaml"
    good = stack.read_text()
    git(repo, "checkout", "-q", "-b", "broken-config")
    try:
        stack.write_text(good.replace("min_size: 2", "min_size: -2", 1))
        commit_all(repo, "a system pool of -2 nodes")
    finally:
        git(repo, "checkout", "-q", "-")
    assert stack.read_text() == good
    with pytest.raises(RevisionError) as caught:
        revision.plan_at("broken-config", "pretrain", repo)
    message = str(caught.value)
    assert caught.value.exit_code == 2  # the revision's own config error: bad input
    assert message.startswith("synth of pretrain at broken-config (")
    assert "system_pool" in message and "min_size" in message
    assert "\n" not in message
    assert worktrees(repo) == [str(repo)]


def test_a_stack_name_that_is_a_path_is_refused(repo: Path) -> None:
    with pytest.raises(RevisionError) as caught:
        revision.plan_at("HEAD", "../pretrain", repo)
    assert caught.value.exit_code == 2
    assert "not a stack name" in str(caught.value)


def commit_on_branch(repo: Path, branch: str, edit: Callable[[Path], None], message: str) -> str:
    """A commit on a new branch from HEAD, made in a worktree of its own: the repository's
    working tree and HEAD stay as they are."""
    with tempfile.TemporaryDirectory() as parent:
        tree = Path(parent) / branch
        git(repo, "worktree", "add", "-q", "-b", branch, str(tree), "HEAD")
        try:
            edit(tree)
            sha = commit_all(tree, message)
        finally:
            git(repo, "worktree", "remove", "--force", str(tree))
    return sha


def test_a_revision_without_the_cli_is_one_line_not_run_by_an_installed_cli(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # This process's editable install maps `llmp` to the checkout under test: without the
    # bootstrap's guard, a revision lacking llmp/cli.py (or llmp altogether) would be
    # synthesized by the checkout's CLI and stack file, a plan that silently is not its own.
    commit_on_branch(repo, "before-cli", lambda t: (t / "llmp" / "cli.py").unlink(), "no CLI")
    commit_on_branch(repo, "before-llmp", lambda t: shutil.rmtree(t / "llmp"), "no llmp")
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))  # another checkout on the path, too
    for branch in ("before-cli", "before-llmp"):
        with pytest.raises(RevisionError) as caught:
            revision.plan_at(branch, "pretrain", repo)
        message = str(caught.value)
        assert caught.value.exit_code == 2
        assert message.startswith(f"synth of pretrain at {branch} (")
        assert "this revision has no llmp/cli.py" in message
        assert "\n" not in message
    # `llmp diff` names the base as the user did, not by its SHA alone.
    sha = git(repo, "rev-parse", "--short=7", "before-cli").strip()
    with pytest.raises(RevisionError, match=rf"^synth of pretrain at before-cli \({sha}\) failed"):
        build_report("pretrain", "before-cli", repo)
    assert worktrees(repo) == [str(repo)]


def test_an_older_synth_lacking_an_option_shows_its_usage_error_not_a_frame(repo: Path) -> None:
    def rename_out(tree: Path) -> None:
        cli = tree / "llmp" / "commands" / "synth.py"
        text = cli.read_text()
        assert 'typer.Option("--out",' in text
        cli.write_text(text.replace('typer.Option("--out",', 'typer.Option("--output",', 1))

    commit_on_branch(repo, "older-synth", rename_out, "synth --output")
    with pytest.raises(RevisionError) as caught:
        revision.plan_at("older-synth", "pretrain", repo)
    message = str(caught.value)
    assert caught.value.exit_code == 2  # typer's usage error
    assert message.startswith("synth of pretrain at older-synth (")
    assert "No such option: --out" in message
    assert "╰" not in message and "│" not in message and "\n" not in message


def test_an_error_panel_is_read_as_its_text() -> None:
    panel = (
        "Usage: llmp synth [OPTIONS] STACK\n"
        "╭─ Error ──────────────────────────╮\n"
        "│ No such option: --out (Possible  │\n"
        "│ options: --output)               │\n"
        "╰──────────────────────────────────╯\n"
    )
    assert revision._last_line(panel) == "No such option: --out (Possible options: --output)"
    assert revision._last_line("Traceback ...\nValueError: bad\n\n") == "ValueError: bad"


def test_a_ci_checkout_compares_with_a_remote_tracking_base_from_a_detached_head(
    repo: Path, tmp_path: Path
) -> None:
    """As actions/checkout leaves it (fetch-depth: 0): no local branch, HEAD detached at the
    PR's merge commit, the base only as origin/<base>; llmp run from a subdirectory."""
    base = git(repo, "branch", "--show-current").strip()
    clone = tmp_path / "ci"
    clone.mkdir()
    git(clone, "init", "-q")
    git(clone, "remote", "add", "origin", repo.as_uri())
    git(clone, "fetch", "-q", "origin", "+refs/heads/*:refs/remotes/origin/*")
    git(clone, "checkout", "-q", "--detach", f"origin/{base}")
    # The PR's merge commit prices p5 otherwise: the base's price must come from the base.
    catalog = clone / "spec" / "catalog.yaml"
    priced = f"on_demand_usd_per_hour: {REVISION_PRICE}"
    assert priced in catalog.read_text()
    catalog.write_text(catalog.read_text().replace(priced, "on_demand_usd_per_hour: 12.34", 1))
    commit_all(clone, "merge commit")
    assert git(clone, "for-each-ref", "refs/heads").strip() == ""  # no local branch
    assert git(clone, "rev-parse", "--abbrev-ref", "HEAD").strip() == "HEAD"  # detached

    plan = revision.plan_at(f"origin/{base}", "pretrain", clone / "spec")
    assert plan.outputs["cost"]["node_pools"]["h100"]["usd_per_instance_hour"] == REVISION_PRICE
    assert worktrees(clone) == [str(clone)]


def test_a_shallow_checkout_without_the_base_says_how_to_fetch_it(
    repo: Path, tmp_path: Path
) -> None:
    base = git(repo, "branch", "--show-current").strip()
    shallow = tmp_path / "shallow"
    shallow.mkdir()
    git(shallow, "init", "-q")
    # fetch-depth: 1 fetches the merge commit alone, under the PR's ref (by URL here: a
    # named remote would also update origin/<base> on the way).
    git(
        shallow,
        "fetch",
        "-q",
        "--depth=1",
        repo.as_uri(),
        f"+refs/heads/{base}:refs/remotes/pull/1",
    )
    git(shallow, "checkout", "-q", "--detach", "refs/remotes/pull/1")
    for ref in (f"origin/{base}", "HEAD~1"):
        with pytest.raises(RevisionError) as caught:
            revision.plan_at(ref, "pretrain", shallow)
        message = str(caught.value)
        assert caught.value.exit_code == 2
        assert message.startswith(f"unknown revision {ref!r}")
        assert "fetch-depth: 0" in message and "\n" not in message


def test_worktrees_left_by_a_killed_run_do_not_break_the_next(repo: Path, tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    head = revision.resolve("HEAD", clone)
    # Two runs killed before their `finally`: one left its directory, one's was cleaned up
    # (a fresh TMPDIR), leaving git a worktree entry whose directory is gone.
    left = tmp_path / "llmp-diff-left" / f"rev-{head.short}"
    gone = tmp_path / "llmp-diff-gone" / f"rev-{head.short}"
    for tree in (left, gone):
        git(clone, "worktree", "add", "-q", "--detach", str(tree), head.sha)
    shutil.rmtree(gone.parent)
    with revision.checked_out(clone, head) as tree:
        assert (tree / "spec" / "catalog.yaml").is_file()
        assert revision.import_origins(tree)["spec"] == str(
            tree.resolve() / "spec" / "__init__.py"
        )
    assert worktrees(clone) == [str(clone), str(left)]  # the stale entry pruned, no new one


def test_the_tree_s_interpreter_ignores_pythonsafepath_and_pythonpath(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONSAFEPATH", "1")  # would drop the worktree from sys.path
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))  # would then serve the checkout's code
    head = revision.resolve("HEAD", repo)
    with revision.checked_out(repo, head) as tree:
        origins = revision.import_origins(tree)
    assert origins and all(
        o is not None and Path(o).is_relative_to(tree.resolve()) for o in origins.values()
    )
