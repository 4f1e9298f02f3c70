"""Synthesize a stack as it is at a git revision, with that revision's own code.

`llmp diff` compares the plan of a stack at a base revision with the plan of
the working tree (or of another revision). A revision's plan must come from
that revision's program: its spec/, program/, components/, workloads/ and catalog, not
from whatever the working tree has now. So a revision is checked out into a
temporary `git worktree` and synthesized by a fresh interpreter (the current
one, `sys.executable`, with the project's dependencies) whose working
directory is the worktree: `python -c` puts the working directory first on
sys.path, ahead of the editable install's path entry or finder, so
`import spec` finds the worktree's copy. The bootstrap below checks that
before anything runs, and refuses to synthesize when it is not so.

The working tree of the running code is synthesized in-process: it is the
code already imported, so a subprocess would only add a second interpreter
start. Any other tree goes through the same subprocess as a revision.

A revision's code is not the code the user is running: whoever can push a branch
chose it. So its interpreter gets none of the caller's environment but an allow-list
(`tree_env`): PATH and the locale, a HOME of its own (an empty temporary directory, so
no ~/.aws, ~/.pulumi or ~/.kube is found), no AWS, Pulumi, Google, Azure or Kubernetes
credentials, proxies pointing at a closed local port, the instance metadata service
off; and the bootstrap turns sockets off before the revision's first import
(`connect`, `sendto` and name resolution raise). The synthesis needs no network in
any case: it runs under Pulumi's mock runtime, and the mock refuses provider
look-ups.

Every failure is a `RevisionError` with one line for the user and the exit
code `llmp` should end with (2 bad input, 1 the program failed).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from llmp.errors import EXIT_BAD_INPUT, EXIT_FAILED, LlmpError
from llmp.plan import Plan, PlanError, parse_plan

__all__ = [
    "WORKING_TREE",
    "Revision",
    "RevisionError",
    "StackMissing",
    "check_stack_name",
    "checked_out",
    "import_origins",
    "plan_at",
    "plan_of_revision",
    "plan_of_worktree",
    "repo_root",
    "resolve",
    "stack_file_at",
    "stack_relpath",
    "tree_env",
]

WORKING_TREE = "the working tree"
"""How the working tree is named in messages and reports."""

_GIT_TIMEOUT_S = 120
_SYNTH_TIMEOUT_S = 900


class RevisionError(LlmpError):
    """A revision cannot be synthesized; `str()` is one line, `exit_code` is 1 or 2."""

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT):
        super().__init__(message, exit_code=exit_code)


class StackMissing(RevisionError):
    """The stack has no stack file at that revision (added or removed by the change)."""

    def __init__(self, stack: str, where: str):
        super().__init__(f"stack {stack} does not exist at {where}")
        self.stack = stack
        self.where = where


@dataclass(frozen=True)
class Revision:
    """A resolved revision: what the user typed, and the commit it names."""

    ref: str
    sha: str

    @property
    def short(self) -> str:
        return self.sha[:7]

    @property
    def label(self) -> str:
        return self.short if self.ref in (self.sha, self.short) else f"{self.ref} ({self.short})"


# ---------------------------------------------------------------------------
# git
# ---------------------------------------------------------------------------


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=_GIT_TIMEOUT_S,
        )
    except FileNotFoundError:
        raise RevisionError("git is not installed: llmp diff needs it to read revisions") from None
    except subprocess.TimeoutExpired:
        raise RevisionError(
            f"git {args[0]} in {repo} took over {_GIT_TIMEOUT_S} s", EXIT_FAILED
        ) from None
    if check and done.returncode != 0:
        raise RevisionError(f"git {' '.join(args)} failed in {repo}: {_last_line(done.stderr)}")
    return done


def repo_root(path: Path) -> Path:
    """The top of the git work tree holding `path`; RevisionError when there is none."""
    done = _git(path, "rev-parse", "--show-toplevel", check=False)
    if done.returncode != 0:
        raise RevisionError(
            f"{path} is not in a git repository: comparing git revisions needs "
            "a clone of the project"
        )
    return Path(done.stdout.strip())


def resolve(ref: str, repo: Path) -> Revision:
    """The commit `ref` names in `repo`; RevisionError (one line) for an unknown one."""
    if not ref or ref.startswith("-"):
        raise RevisionError(f"not a git revision: {ref!r}; e.g. main, origin/main, HEAD~1, a SHA")
    repo_root(repo)
    done = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    if done.returncode != 0 or not done.stdout.strip():
        raise RevisionError(
            f"unknown revision {ref!r} in {repo}: name a branch, tag or commit that exists "
            "(in CI, fetch the base first: git fetch origin main, or checkout with fetch-depth: 0)"
        )
    return Revision(ref, done.stdout.strip())


def stack_relpath(stack: str, config: str | None = None) -> str:
    """The stack file's path inside the repository, as git names it (`config`: another
    stack file's, already relative to the repository: `llmp diff --config FILE`)."""
    from llmp.stacks import REPO_ROOT, stack_file

    if config is not None:
        return config
    return stack_file(stack).relative_to(REPO_ROOT).as_posix()


def check_stack_name(stack: str) -> None:
    """Refuse a stack name that is not one (it becomes a path inside a revision)."""
    from llmp.stacks import stack_name_problem

    problem = stack_name_problem(stack)
    if problem is not None:
        raise RevisionError(problem)


def stack_file_at(
    revision: Revision, stack: str, repo: Path, config: str | None = None
) -> str | None:
    """The stack file's text at `revision`, or None when the file does not exist there."""
    done = _git(repo, "show", f"{revision.sha}:{stack_relpath(stack, config)}", check=False)
    return done.stdout if done.returncode == 0 else None


@contextlib.contextmanager
def checked_out(repo: Path, revision: Revision) -> Iterator[Path]:
    """A detached `git worktree` of `revision` in a temporary directory.

    It is removed when the block ends, also on an error or Ctrl-C: `git
    worktree remove --force`, `git worktree prune`, then the directory itself.
    """
    parent = Path(tempfile.mkdtemp(prefix="llmp-diff-"))
    tree = parent / f"rev-{revision.short}"
    try:
        _git(repo, "worktree", "add", "--detach", "--quiet", str(tree), revision.sha)
        yield tree
    finally:
        with contextlib.suppress(RevisionError):
            _git(repo, "worktree", "remove", "--force", str(tree), check=False)
            _git(repo, "worktree", "prune", check=False)
        shutil.rmtree(parent, ignore_errors=True)


# ---------------------------------------------------------------------------
# Synthesis in a tree
# ---------------------------------------------------------------------------

# Runs in the tree being synthesized (cwd). `python -c` puts the cwd first on
# sys.path; the guard proves every package of the tree is imported from it,
# not from the editable install of another checkout, before the CLI runs.
_BOOTSTRAP = """\
import importlib.util, json, pathlib, runpy, socket, sys
def _no_network(*args, **kwargs):
    raise OSError("no network for a revision's code: llmp diff synthesizes it offline")
for _name in ("connect", "connect_ex", "sendto", "sendmsg"):
    setattr(socket.socket, _name, _no_network)
socket.create_connection = socket.getaddrinfo = socket.gethostbyname = _no_network
socket.gethostbyname_ex = socket.gethostbyaddr = _no_network
root = pathlib.Path.cwd().resolve()
# setuptools' editable finder sits on sys.meta_path, asked after the tree's own path: it
# would serve a module the revision lacks (llmp.cli before the CLI existed) from the
# checkout it was installed from. Only the tree's modules may run.
sys.meta_path[:] = [
    f for f in sys.meta_path if not str(getattr(f, "__module__", "")).startswith("__editable__")
]
def origin_of(name):
    try:
        spec = importlib.util.find_spec(name)
    except ImportError:
        return None
    return str(pathlib.Path(spec.origin).resolve()) if spec and spec.origin else None
packages = sorted(p.name for p in root.iterdir() if (p / "__init__.py").is_file())
origins = {name: origin_of(name) for name in packages}
stray = {n: o for n, o in origins.items() if o is None or not pathlib.Path(o).is_relative_to(root)}
if stray:
    name, origin = sorted(stray.items())[0]
    sys.exit(f"package {name} would be imported from {origin}, not from {root}")
if sys.argv[1:2] == ["--origins"]:
    print(json.dumps(origins))
    sys.exit(0)
cli = origin_of("llmp.cli")
if cli is None or not pathlib.Path(cli).is_relative_to(root):
    print(
        "this revision has no llmp/cli.py (it predates `llmp synth`), so its own code cannot "
        "synthesize it: compare with a later revision",
        file=sys.stderr,
    )
    sys.exit(2)
sys.argv = ["llmp", *sys.argv[1:]]
runpy.run_module("llmp.cli", run_name="__main__", alter_sys=True)
"""


_PASSED_ON = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TZ", "TMPDIR")
"""What a tree's interpreter gets of the caller's environment: nothing else."""

_NOWHERE = "http://127.0.0.1:9"
"""A proxy that answers nothing (the discard port of the loopback address)."""


def tree_env(home: Path) -> dict[str, str]:
    """The environment of a tree's interpreter: an allow-list, never the caller's whole one.

    No credentials of any kind (AWS_*, PULUMI_ACCESS_TOKEN, PULUMI_CONFIG_PASSPHRASE,
    GOOGLE_*, AZURE_*, KUBECONFIG, GITHUB_TOKEN, ...) reach it: only `_PASSED_ON`. `home`
    (an empty directory) is its HOME and Pulumi's, so no credential file is found either;
    every proxy points at a closed port and the metadata service is off, so an SDK that
    looks for credentials or the network anyway finds neither. PYTHONSAFEPATH and
    PYTHONPATH are not passed on: they would put the editable install ahead of the tree.
    """
    env = {k: v for k, v in os.environ.items() if k in _PASSED_ON}
    env.setdefault("PATH", os.defpath)
    env.update(
        HOME=str(home),
        PULUMI_HOME=str(home / ".pulumi"),
        PULUMI_SKIP_UPDATE_CHECK="true",
        AWS_CONFIG_FILE=str(home / "aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(home / "aws-credentials"),
        AWS_EC2_METADATA_DISABLED="true",
        KUBECONFIG=str(home / "kubeconfig"),
        PYTHONNOUSERSITE="1",
        PYTHONDONTWRITEBYTECODE="1",  # nothing left behind in a worktree being removed
        NO_PROXY="",
        no_proxy="",
    )
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = _NOWHERE
    return env


def _synth_args(tree: Path, stack: str, out: str, config: str | None = None) -> list[str]:
    """`synth STACK --out DIR`, plus `--no-policy` where the tree's synth runs the policy
    pack by default: a revision's plan is wanted even when it violates a policy (`llmp
    diff` evaluates the pack itself), and an older synth would refuse the option."""
    knows = False
    for source in sorted((tree / "llmp").rglob("*.py")):
        try:
            knows = knows or "--no-policy" in source.read_text()
        except (OSError, UnicodeDecodeError):
            continue
    extra = ["--config", str(tree / config)] if config is not None else []
    return ["synth", stack, "--out", out, *extra, *(["--no-policy"] if knows else [])]


def _run_in_tree(tree: Path, args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="llmp-home-") as home:
        return subprocess.run(
            [sys.executable, "-c", _BOOTSTRAP, *args],
            cwd=tree,
            env=tree_env(Path(home)),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )


def import_origins(tree: Path) -> dict[str, str | None]:
    """Where the tree's interpreter imports each of the tree's top-level packages from.

    The same interpreter, environment and bootstrap as a synthesis: the proof
    (and the test) that a revision's own code runs.
    """
    done = _run_in_tree(tree, ["--origins"], timeout=_GIT_TIMEOUT_S)
    if done.returncode != 0:
        raise RevisionError(f"cannot run Python in {tree}: {_last_line(done.stderr)}", EXIT_FAILED)
    origins: dict[str, str | None] = json.loads(done.stdout)
    return origins


def _synth_in_tree(tree: Path, stack: str, where: str, config: str | None = None) -> Plan:
    """`llmp synth STACK` run by the tree's own code; the plan it wrote."""
    with tempfile.TemporaryDirectory(prefix="llmp-plan-") as out:
        args = _synth_args(tree, stack, out, config)
        try:
            done = _run_in_tree(tree, args, timeout=_SYNTH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise RevisionError(
                f"synth of {stack} at {where} took over {_SYNTH_TIMEOUT_S} s", EXIT_FAILED
            ) from None
        if done.returncode != 0:
            code = EXIT_BAD_INPUT if done.returncode == EXIT_BAD_INPUT else EXIT_FAILED
            detail = _last_line(done.stderr) or _last_line(done.stdout) or f"exit {done.returncode}"
            raise RevisionError(f"synth of {stack} at {where} failed: {detail}", code)
        plan_file = Path(out) / stack / "plan.json"
        try:
            return parse_plan(json.loads(plan_file.read_text()), f"the plan of {stack} at {where}")
        except (OSError, ValueError, PlanError) as exc:
            raise RevisionError(
                f"synth of {stack} at {where} wrote no readable plan ({plan_file.name}: {exc})",
                EXIT_FAILED,
            ) from None


def plan_at(ref: str, stack: str, repo: Path) -> Plan:
    """The plan of `stack` as the program at git revision `ref` of `repo` synthesizes it.

    Raises StackMissing when the stack file does not exist at `ref`, and
    RevisionError for anything else (not a repository, unknown revision, a
    synth that fails there).
    """
    check_stack_name(stack)
    revision = resolve(ref, repo)
    return plan_of_revision(revision, stack, repo)


def plan_of_revision(
    revision: Revision, stack: str, repo: Path, config: str | None = None
) -> Plan:
    """`plan_at` for a revision already resolved: messages name it as the user did
    (`origin/main (1a2b3c4)`), not by its SHA alone. `config`: the stack file's path
    in the repository, where it is not stacks/Pulumi.STACK.yaml."""
    check_stack_name(stack)
    if stack_file_at(revision, stack, repo, config) is None:
        raise StackMissing(stack, revision.label)
    with checked_out(repo, revision) as tree:
        return _synth_in_tree(tree, stack, revision.label, config)


def plan_of_worktree(stack: str, repo: Path, config: str | None = None) -> Plan:
    """The plan of `stack` in the working tree of `repo`, uncommitted edits included.

    In-process when `repo` is the tree whose code is running (the usual case:
    `llmp diff` in a checkout); otherwise by that tree's own code in a subprocess.
    """
    from llmp.stacks import REPO_ROOT

    check_stack_name(stack)
    if not (repo / stack_relpath(stack, config)).is_file():
        raise StackMissing(stack, WORKING_TREE)
    if repo.resolve() != REPO_ROOT.resolve():
        return _synth_in_tree(repo, stack, WORKING_TREE, config)
    from llmp.plan.synth import SynthError, synthesize_stack
    from llmp.stacks import StackNotFound
    from spec.errors import ConfigError

    try:
        return synthesize_stack(stack, repo / config if config is not None else None)
    except (ConfigError, StackNotFound) as exc:
        raise RevisionError(f"{stack} in {WORKING_TREE}: {exc}", EXIT_BAD_INPUT) from None
    except SynthError as exc:
        raise RevisionError(
            f"synth of {stack} in {WORKING_TREE} failed: {exc}", EXIT_FAILED
        ) from None


_FRAME = "".join(chr(c) for c in range(0x2500, 0x2580))  # box drawing: rich's panels


def _last_line(text: str) -> str:
    """The last line of a program's error output that says something.

    Typer (through rich) prints a usage error, such as an option an older `llmp synth`
    lacks, in a framed panel: its last line is the frame. Then the panel's text is the
    message, its wrapped lines joined into one.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    while lines and not lines[-1].strip(_FRAME + " "):
        lines.pop()  # the bottom frame
    if not lines:
        return ""
    if not lines[-1].startswith("│"):
        return lines[-1]
    panel: list[str] = []
    while lines and lines[-1].startswith("│"):
        panel.insert(0, lines.pop().strip("│ "))
    return " ".join(part for part in panel if part)
