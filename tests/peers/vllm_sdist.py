"""What a vLLM release accepts and exports, read from its PyPI sdist without importing it.

    python -m tests.peers.vllm_sdist vllm-0.34.0.tar.gz > tests/peers/data/vllm-0.34.0.json

vLLM cannot be installed here (it needs CUDA torch), so its own argument definitions are
read with `ast` from the sdist's source, as its argparse would build them:

- every option string of an `add_argument(...)` call in `vllm/engine/arg_utils.py` (the
  engine) and `vllm/entrypoints/common/cli_args.py` (the server);
- the fields of the server's dataclasses (`FrontendArgs` and its base), which
  `add_cli_args` turns into `--field-name`;
- `--no-X` beside `--X` where argparse gets a `BooleanOptionalAction`: given explicitly, or
  derived (`get_kwargs`) from a config field annotated `bool`;
- the Literal values of the flags whose value the platform chooses, and the fields and
  methods of `--speculative-config`;
- the Prometheus metric families of `vllm/v1/metrics/loggers.py` with their kind, and the
  default buckets of the TTFT and inter-token histograms (`vllm/v1/metrics/buckets.py`);
- the `vllm-openai` image's ENTRYPOINT in `docker/Dockerfile`.

Bad input is one line on stderr and exit 2.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import re
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

ENGINE_ARGS = "vllm/engine/arg_utils.py"
SERVER_ARGS = "vllm/entrypoints/common/cli_args.py"
METRICS = "vllm/v1/metrics/loggers.py"
BUCKETS = "vllm/v1/metrics/buckets.py"
BUCKET_TUPLES = {
    "time_to_first_token": "TIME_TO_FIRST_TOKEN_BUCKETS",
    "inter_token_latency": "INTER_TOKEN_LATENCY_BUCKETS",
}
DOCKERFILE = "docker/Dockerfile"
CONFIG_DIR = "vllm/config/"
SPECULATIVE = "vllm/config/speculative.py"
SERVER_CLASSES = ("BaseFrontendArgs", "FrontendArgs")
VALUE_LITERALS = {
    "--distributed-executor-backend": ("vllm/config/parallel.py", "DistributedExecutorBackend"),
    "--kv-cache-dtype": ("vllm/config/cache.py", "CacheDType"),
    "--quantization": (
        "vllm/model_executor/layers/quantization/__init__.py",
        "QuantizationMethods",
    ),
}
WANTED = frozenset(
    {"PKG-INFO", ENGINE_ARGS, SERVER_ARGS, METRICS, BUCKETS, DOCKERFILE, SPECULATIVE}
    | {p for p, _ in VALUE_LITERALS.values()}
)
METRIC_KINDS = {"_gauge_cls": "gauge", "_counter_cls": "counter", "_histogram_cls": "histogram"}


class SdistError(Exception):
    """The archive is not a vLLM sdist this reader understands."""


class Sdist:
    """The text of the files this reader needs from one sdist, by path below its top
    directory (the config package, and the files named above)."""

    def __init__(self, path: str) -> None:
        try:
            data = Path(path).read_bytes()
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
                members = [m for m in tar.getmembers() if m.isfile()]
                tops = {PurePosixPath(m.name).parts[0] for m in members}
                if len(tops) != 1:
                    raise SdistError(f"{path}: an sdist has one top directory, not {len(tops)}")
                (self.top,) = tops
                self._files: dict[str, str] = {}
                for m in members:
                    name = m.name[len(self.top) + 1 :]
                    if name in WANTED or (name.startswith(CONFIG_DIR) and name.endswith(".py")):
                        handle = tar.extractfile(m)
                        assert handle is not None
                        self._files[name] = handle.read().decode()
        except (OSError, tarfile.TarError, EOFError, UnicodeDecodeError) as e:
            raise SdistError(f"{path}: not a readable .tar.gz ({e})") from e
        self.sha256 = hashlib.sha256(data).hexdigest()

    def paths(self, prefix: str) -> list[str]:
        return sorted(p for p in self._files if p.startswith(prefix))

    def text(self, path: str) -> str:
        if path not in self._files:
            raise SdistError(f"{self.top}: no {path} (another layout than this reader's)")
        return self._files[path]

    def tree(self, path: str) -> ast.Module:
        try:
            return ast.parse(self.text(path), path)
        except SyntaxError as e:
            raise SdistError(f"{self.top}/{path}: not Python ({e.msg}, line {e.lineno})") from e


def version(sdist: Sdist) -> str:
    for line in sdist.text("PKG-INFO").splitlines():
        if line.startswith("Version: "):
            return line.removeprefix("Version: ").strip()
    raise SdistError(f"{sdist.top}/PKG-INFO: no Version line")


def _calls(tree: ast.AST, attr: str) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == attr
        ):
            yield node


def _annotations(tree: ast.Module) -> dict[str, dict[str, str]]:
    """Class -> field -> its annotation as source text (module-level classes)."""
    out: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = {
                s.target.id: ast.unparse(s.annotation)
                for s in node.body
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            }
    return out


def _is_bool(annotation: str) -> bool:
    """What `get_kwargs` gives a BooleanOptionalAction: a bool hint, not bool-or-str."""
    names = set(re.findall(r"[A-Za-z_]+", annotation))
    return "bool" in names and "str" not in names


def _kwargs_classes(tree: ast.Module) -> dict[str, str]:
    """`x_kwargs = get_kwargs(XConfig)` assignments: variable -> config class."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = node.value.func
            if isinstance(func, ast.Name) and func.id == "get_kwargs" and node.value.args:
                arg = node.value.args[0]
                for target in node.targets:
                    if isinstance(target, ast.Name) and isinstance(arg, ast.Name):
                        out[target.id] = arg.id
    return out


def _field_of(call: ast.Call) -> tuple[str, str] | None:
    """(kwargs variable, field) of `**x_kwargs["field"]` or `**{**x_kwargs["field"], ...}`."""
    for kw in call.keywords:
        if kw.arg is not None:
            continue
        value = kw.value
        if isinstance(value, ast.Dict):
            inner = [v for k, v in zip(value.keys, value.values, strict=True) if k is None]
            value = inner[0] if inner else value
        if (
            isinstance(value, ast.Subscript)
            and isinstance(value.value, ast.Name)
            and isinstance(value.slice, ast.Constant)
            and isinstance(value.slice.value, str)
        ):
            return value.value.id, value.slice.value
    return None


def _explicit_boolean(call: ast.Call) -> bool:
    return any(
        kw.arg == "action" and ast.unparse(kw.value).endswith("BooleanOptionalAction")
        for kw in call.keywords
    )


def flags(sdist: Sdist) -> list[str]:
    config: dict[str, dict[str, str]] = {}
    for path in sdist.paths(CONFIG_DIR):
        if path.endswith(".py"):
            config |= _annotations(sdist.tree(path))
    found: set[str] = set()
    for path in (ENGINE_ARGS, SERVER_ARGS):
        tree = sdist.tree(path)
        classes = _kwargs_classes(tree)
        for call in _calls(tree, "add_argument"):
            names = [
                a.value
                for a in call.args
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value[:2] == "--"
            ]
            found.update(names)
            source = _field_of(call)
            boolean = _explicit_boolean(call)
            if source is not None and source[0] in classes:
                annotation = config.get(classes[source[0]], {}).get(source[1], "")
                boolean = boolean or _is_bool(annotation)
            if boolean:
                found.update(f"--no-{n[2:]}" for n in names)
    server = _annotations(sdist.tree(SERVER_ARGS))
    for cls in SERVER_CLASSES:
        if cls not in server:
            raise SdistError(f"{sdist.top}/{SERVER_ARGS}: no class {cls}")
        for field, annotation in server[cls].items():
            flag = "--" + field.replace("_", "-")
            found.add(flag)
            if _is_bool(annotation):
                found.add(f"--no-{flag[2:]}")
    if "--model" not in found:
        raise SdistError(f"{sdist.top}: no --model among the flags read (another layout?)")
    return sorted(found)


def _literals(tree: ast.Module) -> dict[str, list[ast.expr]]:
    """Module-level `Name = Literal[...]`: name -> its elements."""
    out: dict[str, list[ast.expr]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if (
            isinstance(target, ast.Name)
            and isinstance(value, ast.Subscript)
            and ast.unparse(value.value).endswith("Literal")
        ):
            s = value.slice
            out[target.id] = list(s.elts) if isinstance(s, ast.Tuple) else [s]
    return out


def literal(sdist: Sdist, path: str, name: str) -> list[str]:
    """The values of Literal `name` of `path`, other Literals of the file inside it expanded."""
    table = _literals(sdist.tree(path))
    if name not in table:
        raise SdistError(f"{sdist.top}/{path}: no Literal {name}")
    values: set[str] = set()
    todo, seen = [name], set()
    while todo:
        current = todo.pop()
        seen.add(current)
        for e in table[current]:
            if isinstance(e, ast.Constant) and isinstance(e.value, str):
                values.add(e.value)
            elif isinstance(e, ast.Name) and e.id in table and e.id not in seen:
                todo.append(e.id)
            elif isinstance(e, ast.Name):
                raise SdistError(f"{sdist.top}/{path}: {name} names {e.id}, not a Literal there")
    return sorted(values)


def metrics(sdist: Sdist) -> dict[str, str]:
    out: dict[str, str] = {}
    tree = sdist.tree(METRICS)
    for attr, kind in METRIC_KINDS.items():
        for call in _calls(tree, attr):
            for kw in call.keywords:
                if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                    out[str(kw.value.value)] = kind
    if not out:
        raise SdistError(f"{sdist.top}/{METRICS}: no metric families found")
    return dict(sorted(out.items()))


def buckets(sdist: Sdist) -> dict[str, list[float]]:
    """The default bounds of the latency histograms the SLOs read (no custom buckets set)."""
    tuples: dict[str, list[float]] = {}
    for node in sdist.tree(BUCKETS).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            target, value = node.target.id, node.value
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        else:
            continue
        if target in BUCKET_TUPLES.values():
            tuples[target] = [float(b) for b in ast.literal_eval(value)]
    missing = sorted(set(BUCKET_TUPLES.values()) - set(tuples))
    if missing:
        raise SdistError(f"{sdist.top}/{BUCKETS}: no {', '.join(missing)}")
    return {family: tuples[name] for family, name in BUCKET_TUPLES.items()}


def entrypoint(sdist: Sdist) -> list[str]:
    stage = None
    for line in sdist.text(DOCKERFILE).splitlines():
        match = re.match(r"FROM\s+\S+\s+AS\s+(\S+)", line, re.IGNORECASE)
        if match:
            stage = match.group(1)
        elif stage == "vllm-openai" and line.startswith("ENTRYPOINT"):
            return list(json.loads(line.removeprefix("ENTRYPOINT")))
    raise SdistError(f"{sdist.top}/{DOCKERFILE}: no ENTRYPOINT in stage vllm-openai")


def extract(path: str) -> dict[str, Any]:
    sdist = Sdist(path)
    speculative = _annotations(sdist.tree(SPECULATIVE)).get("SpeculativeConfig")
    if speculative is None:
        raise SdistError(f"{sdist.top}/{SPECULATIVE}: no class SpeculativeConfig")
    read = [ENGINE_ARGS, SERVER_ARGS, METRICS, BUCKETS, DOCKERFILE, SPECULATIVE]
    read += [p for p, _ in VALUE_LITERALS.values()]
    return {
        "version": version(sdist),
        "sdist": {"name": PurePosixPath(path).name, "sha256": sdist.sha256},
        "files": {p: hashlib.sha256(sdist.text(p).encode()).hexdigest() for p in sorted(set(read))},
        "entrypoint": entrypoint(sdist),
        "flags": flags(sdist),
        "values": {flag: literal(sdist, *where) for flag, where in VALUE_LITERALS.items()},
        "speculative_config": {
            "fields": sorted(speculative),
            "methods": literal(sdist, SPECULATIVE, "SpeculativeMethod"),
        },
        "metrics": metrics(sdist),
        "buckets": buckets(sdist),
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.peers.vllm_sdist VLLM-X.Y.Z.tar.gz", file=sys.stderr)
        return 2
    try:
        data = extract(argv[0])
    except SdistError as e:
        print(f"vllm_sdist: {e}", file=sys.stderr)
        return 2
    print(json.dumps(data, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
