"""`llmp canary`: judge a model's canary on its SLO burn, then promote or roll it back in
the stack file, so that the next `pulumi up` applies the verdict.

The canary (`serving.models[].canary`) serves `weight` percent of the model's requests
from its own Deployment and Service (`manifests.serving.canary`). The judge reads
Prometheus (read-only, the HTTP API's instant queries) for each SLI of the model's
`slo`: the error ratio of the canary's series (`service="<model>-canary"`) over the
canary's window and its short window, and the stable's (`service="<model>"`) over the
window. A burn rate is that ratio over the budget (1 - objective). Then, in order:

- fewer than `min_requests` canary requests in the window: **wait** (exit 3), nothing
  written: too few to tell;
- an SLI whose canary burns above `max_burn_rate` over the window and the short window,
  while the stable burns less: **rollback** (exit 1): `canary.weight` becomes 0;
- an SLI that burns above `max_burn_rate` on both revisions alike: **wait** (exit 3):
  the cluster burns (load, a node), not the revision; so does one that burned above it
  over the window but no longer in the short window (neither proven good nor bad);
- otherwise **promote** (exit 0): `revision` becomes the canary's, `canary.weight` 0.

Every query is of the stack's serving namespace (`serving`, `<team>-serving` on a shared
cluster) besides the model and the Service: `namespace` is Kubernetes' label of the scraped
Service, so a tenant's Service of the same name elsewhere is not counted. What Prometheus
answers is checked before anything is judged: a ratio outside [0, 1], a request count that
is negative or not finite, NaN, a value that is not a number, more than one series: one line,
exit 2, nothing written (a Prometheus that says -3 is not a canary within its budget).

Either edit changes those lines of the stack file only (comments and layout stay), and
the result is parsed and validated again. Exit 2: bad input, or Prometheus could not be
asked or answered what cannot be (then nothing was judged). Run it from CI on a schedule,
or by hand, with `--prometheus-url` reaching the stack's Prometheus (a port-forward).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from llmp.errors import BadInput, Failed
from llmp.serving.promote import KEY, SERVING_KEY, key_line
from spec.errors import show
from spec.promql import ImpossibleValue, checked, sample_value

EXIT_ROLLBACK = 1
EXIT_WAIT = 3
ROUNDING = 1e-9
"""How far outside [0, 1] a ratio may be from float rounding alone (taken as the bound)."""
Verdict = Literal["promote", "rollback", "wait"]


@dataclass(frozen=True)
class SliJudgement:
    sli: str
    objective: float
    canary_burn: float | None
    """Over the window; None: no observation."""
    canary_short_burn: float | None
    stable_burn: float | None

    def burning(self, limit: float) -> bool:
        return (
            self.canary_burn is not None
            and self.canary_short_burn is not None
            and self.canary_burn > limit
            and self.canary_short_burn > limit
        )

    def stable_as_bad(self) -> bool:
        return (
            self.stable_burn is not None
            and self.canary_burn is not None
            and self.stable_burn >= self.canary_burn
        )


@dataclass(frozen=True)
class Judgement:
    stack: str
    model: str
    stable: str
    canary: str
    weight: int
    window: str
    short_window: str
    max_burn_rate: float
    min_requests: int
    requests: float
    slis: list[SliJudgement]
    verdict: Verdict
    reason: str
    changes: dict[str, str] = field(default_factory=dict)
    """What the verdict writes: `revision`, `canary.weight` -> the new value."""
    namespace: str = "serving"
    """The namespace whose series were judged (the stack's serving namespace)."""

    @property
    def exit_code(self) -> int:
        return {"promote": 0, "rollback": EXIT_ROLLBACK, "wait": EXIT_WAIT}[self.verdict]

    def line(self) -> str:
        """The one-line verdict."""
        return f"{self.verdict}: {self.model} canary {self.canary} ({self.weight}%): {self.reason}"

    def details(self) -> list[str]:
        """The burn rates behind it, a line per SLI (canary over the window and the short
        window, the stable over the window)."""

        def f(v: float | None) -> str:
            return "-" if v is None else f"{v:.3g}x"

        lines = [
            f"  {s.sli:<5} canary {f(s.canary_burn)} over {self.window}, "
            f"{f(s.canary_short_burn)} over {self.short_window}; stable {f(s.stable_burn)}"
            for s in self.slis
        ]
        lines.append(
            f"  {self.requests:.0f} canary requests in {self.window} (judged from "
            f"{self.min_requests}); limit {self.max_burn_rate:g}x the SLO budget"
        )
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "namespace": self.namespace,
            "model": self.model,
            "stable_revision": self.stable,
            "canary_revision": self.canary,
            "weight": self.weight,
            "window": self.window,
            "short_window": self.short_window,
            "max_burn_rate": self.max_burn_rate,
            "min_requests": self.min_requests,
            "requests": self.requests,
            "slis": [s.__dict__ for s in self.slis],
            "verdict": self.verdict,
            "reason": self.reason,
            "changes": self.changes,
            "exit_code": self.exit_code,
        }


def _scalar(data: dict[str, Any], what: str) -> float | None:
    """The one value of an instant query's answer (None: no series: nothing observed).

    The judge's queries sum to one series and divide only by a positive total, so anything
    else is impossible: more than one series, a malformed sample, a value that is no number
    (NaN included). ImpossibleValue, one line."""
    kind = data.get("resultType")
    result = data.get("result")
    if kind == "scalar":
        result = [{"value": result}]
    elif kind != "vector" or not isinstance(result, list):
        raise ImpossibleValue(f"{what}: a {kind or 'malformed'} result, not a vector")
    if not result:
        return None
    if len(result) > 1:
        raise ImpossibleValue(f"{what}: {len(result)} series, not one")
    sample = result[0].get("value") if isinstance(result[0], dict) else None
    if not isinstance(sample, list) or len(sample) != 2:
        raise ImpossibleValue(f"{what}: a malformed sample: {show(sample)}")
    value = sample_value(sample[1], what)
    if math.isnan(value):
        raise ImpossibleValue(f"{what}: NaN, not a number")
    return value


def _ratio(value: float | None, what: str) -> float | None:
    """An error ratio: in [0, 1] (rounding aside), else ImpossibleValue."""
    if value is None:
        return None
    if -ROUNDING <= value < 0 or 1 < value <= 1 + ROUNDING:
        return min(max(value, 0.0), 1.0)
    return checked(value, what, high=1.0)


def judge(
    stack: str, prometheus_url: str, model: str, config_file: Path | None = None
) -> Judgement:
    """The verdict on `model`'s canary in `stack`, from Prometheus at `prometheus_url`."""
    from llmp.stacks import stack_path
    from manifests.serving import NAMESPACE as SERVING_NAMESPACE
    from manifests.serving.vllm import CANARY, workload_name
    from monitoring import serving_slo
    from spec.stackfile import load_config, load_stack_file
    from workloads.diagnosis import prometheus, trace

    cfg = load_config(load_stack_file(str(stack_path(stack, config_file))))
    if cfg.serving is None:
        raise BadInput(f"stack {stack} serves no models (no {SERVING_KEY})")
    served = {m.name: m for m in cfg.serving.models}
    if model not in served:
        raise BadInput(f"stack {stack} serves no model {model!r}; it serves {', '.join(served)}")
    m = served[model]
    canary = m.live_canary
    if canary is None:
        raise BadInput(f"{model} has no canary with traffic (serving.models[{model}].canary)")
    stable_svc, canary_svc = workload_name(model), workload_name(model, CANARY)
    team = cfg.team_name(stack)
    namespace = f"{team}-{SERVING_NAMESPACE}" if team else SERVING_NAMESPACE

    def ask(expr: str, what: str) -> float | None:
        try:
            return _scalar(prometheus.query(prometheus_url, "query", {"query": expr}), what)
        except (prometheus.SourceUnavailable, trace.BadInput, ImpossibleValue) as exc:
            raise BadInput(f"could not judge: {exc}") from None

    def burn(ratio: float | None, budget: float) -> float | None:
        return None if ratio is None else ratio / budget

    counted = f"{canary_svc} requests ({canary.window})"
    requests = ask(
        serving_slo.revision_requests(model, canary_svc, canary.window, namespace), counted
    )
    try:
        requests = checked(requests, counted) if requests is not None else 0.0
        slis = []
        for sli, (key, _, _) in serving_slo.SLIS.items():
            slo = getattr(m.slo, key)
            budget = 1 - slo.objective

            def ratio(
                service: str, window: str, sli: str = sli, target: float = slo.target_seconds
            ) -> float | None:
                what = f"{service} {sli} error ratio ({window})"
                expr = serving_slo.revision_error_ratio(
                    model, service, sli, target, window, namespace
                )
                return _ratio(ask(expr, what), what)

            slis.append(
                SliJudgement(
                    sli=sli,
                    objective=slo.objective,
                    canary_burn=burn(ratio(canary_svc, canary.window), budget),
                    canary_short_burn=burn(ratio(canary_svc, canary.short_window), budget),
                    stable_burn=burn(ratio(stable_svc, canary.window), budget),
                )
            )
    except ImpossibleValue as exc:
        raise BadInput(f"could not judge: {exc}") from None
    limit = canary.max_burn_rate

    def shown(group: list[SliJudgement]) -> str:
        return ", ".join(f"{s.sli} {s.canary_burn or 0:.3g}x" for s in group)

    verdict: Verdict
    changes: dict[str, str] = {}
    if requests < canary.min_requests:
        verdict = "wait"
        reason = f"{requests:.0f} requests, fewer than {canary.min_requests}"
    else:
        bad = [s for s in slis if s.burning(limit)]
        blamed = [s for s in bad if not s.stable_as_bad()]
        over = [s for s in slis if s.canary_burn is not None and s.canary_burn > limit]
        if blamed:
            verdict = "rollback"
            reason = f"{shown(blamed)} > {limit:g}x"
            changes = {"canary.weight": "0"}
        elif bad:
            verdict = "wait"
            reason = f"the stable burns as much ({shown(bad)})"
        elif over:
            verdict = "wait"
            reason = f"burned {shown(over)} > {limit:g}x, no longer"
        else:
            verdict = "promote"
            reason = f"within {limit:g}x"
            changes = {"revision": canary.revision, "canary.weight": "0"}
    return Judgement(
        stack=stack,
        model=model,
        stable=m.revision,
        canary=canary.revision,
        weight=canary.weight,
        window=canary.window,
        short_window=canary.short_window,
        max_burn_rate=limit,
        min_requests=canary.min_requests,
        requests=requests,
        slis=slis,
        verdict=verdict,
        reason=reason,
        changes=changes,
        namespace=namespace,
    )


# ---------------------------------------------------------------------------
# The stack file's edit
# ---------------------------------------------------------------------------


def apply(stack_file: Path, model: str, changes: dict[str, str], *, write: bool) -> str:
    """The unified diff of the stack file with `changes` made (written when `write`); only
    those values change, which the parsed file proves."""
    old_text = stack_file.read_text()
    lines = old_text.splitlines(keepends=True)
    for dotted, value in changes.items():
        path = tuple(dotted.split("."))
        index = key_line(lines, model, path)
        if index is None:
            raise BadInput(
                f"serving.models[{model}].{dotted} is not in block style in "
                f"{stack_file.name}: set it to {value} by hand"
            )
        m = KEY.match(lines[index].rstrip("\n"))
        assert m is not None
        newline = "\n" if lines[index].endswith("\n") else ""
        lines[index] = f"{m.group('head')}{value}{m.group('tail')}{newline}"
    new_text = "".join(lines)
    before, after = yaml.safe_load(old_text), yaml.safe_load(new_text)
    for item in before["config"][SERVING_KEY]["models"]:
        if item["name"] == model:
            for dotted, value in changes.items():
                *parents, last = dotted.split(".")
                node = item
                for p in parents:
                    node = node[p]
                node[last] = yaml.safe_load(value)
    if before != after:
        raise Failed("editing the stack file would change more than the verdict; not written")
    if write:
        from llmp.files import replace_file
        from spec.stackfile import load_config

        load_config(after["config"])  # the verdict's file must be a valid stack
        replace_file(stack_file, new_text, stack=stack_file.name)  # atomic: all or nothing
    return "".join(
        difflib.unified_diff(
            old_text.splitlines(keepends=True),
            new_text.splitlines(keepends=True),
            fromfile=f"a/{stack_file.name}",
            tofile=f"b/{stack_file.name}",
            n=1,
        )
    )


__all__ = ["Judgement", "SliJudgement", "apply", "judge", "key_line"]
