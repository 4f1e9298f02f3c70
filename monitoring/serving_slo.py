"""Latency SLOs of the served models: TTFT and inter-token latency, alerted on burn rates.

Per model (`serving.models[].slo`), two SLIs over vLLM v0.34.0's histograms (the names
and buckets of its `vllm/v1/metrics/loggers.py`; label `model_name` is the served name):

- `ttft`: the share of requests whose first token came within the target,
  `vllm:time_to_first_token_seconds_bucket{le=<target>}` over `_count`;
- `itl`: the share of inter-token gaps within the target,
  `vllm:inter_token_latency_seconds` likewise (v0.11.0 renamed it from
  `vllm:time_per_output_token_seconds`, which v0.34.0 no longer exports).

Per revision, where a model has a live canary: the same ratios of each revision's series
(`service` = its Service, `<model>` or `<model>-canary`, the label prometheus-operator's
ServiceMonitor sets) over the canary's windows: what `llmp canary` judges, there also of the
stack's serving namespace only (`namespace`, Kubernetes' label of the scraped Service: a
tenant's Service of the same name elsewhere is not counted). A revision with no observations
in a window has no ratio (the total must be above 0: no 0/0 NaN), so a ratio Prometheus
returns is in [0, 1] or wrong.

The error ratio (1 - good/total) is recorded over each window of the SRE workbook's
multi-window, multi-burn-rate alerts, which compare it with the budget (1 - objective)
times a burn factor over a long and a short window at once: 14.4x over 1h and 5m and 6x
over 6h and 30m page (2% and 5% of a 30-day budget spent); 3x over 1d and 2h and 1x over
3d and 6h open a ticket. The short window makes an alert stop soon after the burn does.
A model with no traffic has no ratio (0/0) and stays quiet.

The target must be a bucket bound of the histogram (`spec.serving` checks it), written
as vLLM's Python client writes it (`2.5`, `1.0`, `10.0`). The committed file
`monitoring/slo/inference.yaml` is the inference stack's, which promtool checks and tests;
`python -m monitoring.serving_slo` rewrites it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from monitoring.models import Metadata, PrometheusRule, Rule, RuleGroup, RuleSpec
from spec.promql import matchers
from spec.serving import LatencySloConfig, ServingConfig

SLO_DIR = Path(__file__).with_name("slo")
RULE_NAME = "llmp-serving-slo"
SLIS = {
    "ttft": ("time_to_first_token", "vllm:time_to_first_token_seconds", "time to first token"),
    "itl": ("inter_token_latency", "vllm:inter_token_latency_seconds", "inter-token latency"),
}
"""SLI -> (its key in serving.models[].slo, vLLM's histogram, what it is in words)."""


@dataclass(frozen=True)
class BurnAlert:
    name: str
    long: str
    short: str
    factor: float
    for_: str
    severity: str
    spent: str
    """What the burn spends of a 30-day budget, in words."""


BURN_ALERTS = (
    BurnAlert("ServingLatencyBudgetBurn1h", "1h", "5m", 14.4, "2m", "critical", "2% in 1h"),
    BurnAlert("ServingLatencyBudgetBurn6h", "6h", "30m", 6.0, "15m", "critical", "5% in 6h"),
    BurnAlert("ServingLatencyBudgetBurn1d", "1d", "2h", 3.0, "1h", "warning", "10% in 1d"),
    BurnAlert("ServingLatencyBudgetBurn3d", "3d", "6h", 1.0, "3h", "warning", "10% in 3d"),
)
WINDOWS = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")


def error_ratio(window: str) -> str:
    """The recorded share of bad observations over `window` (labels model_name, sli)."""
    return f"llmp:vllm_slo_errors:ratio_rate{window}"


def bucket_label(target: float) -> str:
    """A bucket bound as Prometheus' Python client writes `le` (repr of the float)."""
    return repr(float(target))


def _ratio(model: str, metric: str, target: float, window: str) -> str:
    sel = f'model_name="{model}"'
    le = f'le="{bucket_label(target)}"'
    good = f"sum by (model_name) (rate({metric}_bucket{{{sel},{le}}}[{window}]))"
    total = f"sum by (model_name) (rate({metric}_count{{{sel}}}[{window}]))"
    return f"1 - ({good} / {total})"


def revision_error_ratio_record(window: str) -> str:
    """The recorded share of bad observations of one revision (labels model_name, sli,
    service), where a model has a live canary."""
    return f"llmp:vllm_slo_errors_by_revision:ratio_rate{window}"


def _revision(model: str, service: str, namespace: str | None) -> str:
    """The matchers of one revision's series: its model and Service (and namespace, given)."""
    labels = {"namespace": namespace} if namespace is not None else {}
    return matchers({**labels, "model_name": model, "service": service})


def revision_error_ratio(
    model: str,
    service: str,
    sli: str,
    target: float,
    window: str,
    namespace: str | None = None,
) -> str:
    """The error ratio of one revision of `model`: the series scraped from its Service
    (`service`, which prometheus-operator's ServiceMonitor sets on every target) in
    `namespace` (None: any), as `llmp canary` judges a canary against the stable. No
    observation in the window: no sample (the total must be above 0)."""
    metric = SLIS[sli][1]
    sel = _revision(model, service, namespace)
    le = f'le="{bucket_label(target)}"'
    good = f"sum(rate({metric}_bucket{{{sel},{le}}}[{window}]))"
    total = f"sum(rate({metric}_count{{{sel}}}[{window}]))"
    return f"1 - ({good} / ({total} > 0))"


def revision_requests(model: str, service: str, window: str, namespace: str | None = None) -> str:
    """Requests one revision served over `window` (one first token each), in `namespace`."""
    metric = SLIS["ttft"][1]
    return f"sum(increase({metric}_count{{{_revision(model, service, namespace)}}}[{window}]))"


def _slos(serving: ServingConfig) -> list[tuple[str, str, LatencySloConfig]]:
    """(model, sli, its objective) of every served model."""
    return [
        (m.name, sli, getattr(m.slo, key))
        for m in serving.models
        for sli, (key, _, _) in SLIS.items()
    ]


def recording_rules(serving: ServingConfig) -> RuleGroup:
    rules = [
        Rule(
            record=error_ratio(window),
            expr=_ratio(model, SLIS[sli][1], slo.target_seconds, window),
            # Static too: rules differ by their labels, not only by their expressions.
            labels={"model_name": model, "sli": sli},
        )
        for model, sli, slo in _slos(serving)
        for window in WINDOWS
    ]
    # A live canary: each revision's ratio over the canary's windows, by its Service, for
    # dashboards beside `llmp canary`'s verdict (which asks for the same expressions).
    for m in serving.models:
        canary = m.live_canary
        if canary is None:
            continue
        for sli, (key, _, _) in SLIS.items():
            slo = getattr(m.slo, key)
            for service in (m.name, f"{m.name}-canary"):
                for window in dict.fromkeys((canary.window, canary.short_window)):
                    rules.append(
                        Rule(
                            record=revision_error_ratio_record(window),
                            expr=revision_error_ratio(
                                m.name, service, sli, slo.target_seconds, window
                            ),
                            labels={"model_name": m.name, "sli": sli, "service": service},
                        )
                    )
    return RuleGroup(name="serving-slo-recording", rules=rules)


def alert_rules(serving: ServingConfig) -> RuleGroup:
    rules = []
    for model, sli, slo in _slos(serving):
        budget = 1 - slo.objective
        sel = f'{{model_name="{model}",sli="{sli}"}}'
        words = SLIS[sli][2]
        for a in BURN_ALERTS:
            threshold = f"{a.factor * budget:.6g}"
            rules.append(
                Rule(
                    alert=a.name,
                    expr=(
                        f"{error_ratio(a.long)}{sel} > {threshold} and "
                        f"{error_ratio(a.short)}{sel} > {threshold}"
                    ),
                    **{"for": a.for_},
                    labels={"severity": a.severity, "model_name": model, "sli": sli},
                    annotations={
                        "summary": (
                            f"{model}: {words} over {slo.target_seconds:g} s burns the "
                            f"{slo.objective:.4g} objective's 30-day budget {a.factor:g}x too "
                            f"fast ({a.spent})."
                        ),
                        "runbook": (
                            "Compare vllm:num_requests_waiting and the gateway's 429s with "
                            "the replicas KEDA runs; raise max_replicas or lower max_num_seqs."
                        ),
                    },
                )
            )
    return RuleGroup(name="serving-slo", rules=rules)


def rule_groups(serving: ServingConfig) -> list[RuleGroup]:
    return [recording_rules(serving), alert_rules(serving)]


def prometheus_rule(serving: ServingConfig, namespace: str) -> PrometheusRule:
    return PrometheusRule(
        metadata=Metadata(
            name=RULE_NAME,
            namespace=namespace,
            labels={"app.kubernetes.io/part-of": "llm-platform"},
        ),
        spec=RuleSpec(groups=rule_groups(serving)),
    )


def file_text(serving: ServingConfig) -> str:
    data = {"groups": [g.dump() for g in rule_groups(serving)]}
    return yaml.safe_dump(data, sort_keys=False, width=1000)


STACK_FILE = Path(__file__).parents[1] / "stacks" / "Pulumi.inference.yaml"


def committed_stack() -> ServingConfig:
    """The inference stack's serving section: what the committed file is written for."""
    from spec.stackfile import load_config, load_stack_file

    cfg = load_config(load_stack_file(str(STACK_FILE)))
    assert cfg.serving is not None
    return cfg.serving


def write(directory: Path = SLO_DIR) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "inference.yaml"
    path.write_text(file_text(committed_stack()))
    return path


if __name__ == "__main__":
    print(write())
