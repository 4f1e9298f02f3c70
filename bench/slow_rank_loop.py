"""A slow rank, from injection to a page, at real time (prints; asserts nothing).

Runs the loop of tests/workloads/diagnosis/test_slow_rank_loop.py (`slow_rank.run_loop`): gloo
ranks training on the CPU, one throttled once the run is warm; a real Prometheus (Debian's)
scraping the trainer and the straggler watcher, evaluating the platform's rules; a real
Alertmanager routing with the platform's tree to a webhook. Prints the seconds from the
injection to the watcher naming the node (diagnosis) and to the webhook receiving
`LlmpSlowNode` (receiver), and what was received.

Profiles:
- `stack`: the stack's own settings: scrape and rule evaluation every 30 s
  (kube-prometheus-stack's), the watcher's defaults (spec.monitoring.StragglerWatchConfig:
  window 4m, resolution 15s, a run a minute), the rules' `for` as committed (LlmpSlowNode
  has none), Alertmanager's group_wait 30s; a whole window of healthy training first.
- `fast`: the test's: 1 s intervals, a 60 s window, a run every 5 s, every `for` / 60.

    PATH=/path/to/prometheus/bin:$PATH .venv/bin/python bench/slow_rank_loop.py [--profile stack]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spec.monitoring import StragglerWatchConfig, duration_seconds  # noqa: E402
from tests.workloads.diagnosis.slow_rank import FalseAlarm, LoopSettings, run_loop  # noqa: E402

_WATCH = StragglerWatchConfig()
PROFILES = {
    "stack": LoopSettings(
        scrape_interval="30s",
        for_scale=1.0,
        window=_WATCH.window,
        resolution=_WATCH.resolution,
        interval_s=float(_WATCH.interval_seconds),
        group_wait="30s",
        warm_s=float(duration_seconds(_WATCH.window)),
        patience_s=1200.0,
    ),
    "fast": LoopSettings(),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", choices=sorted(PROFILES), default="stack")
    ap.add_argument("--keep", type=Path, help="keep the run's files here")
    args = ap.parse_args()
    settings = PROFILES[args.profile]
    with tempfile.TemporaryDirectory() as scratch:
        workdir = args.keep or Path(scratch)
        t0 = time.monotonic()
        try:
            result = run_loop(workdir, settings)
        except FalseAlarm as exc:
            print(f"no figure: {exc}")
            return 1
        total = time.monotonic() - t0
    f = result.finding
    print(
        f"profile {args.profile}: {settings.ranks} gloo ranks, "
        f"rank {settings.slow_rank} slowed by {settings.delay_s:g} s a step"
    )
    print(
        f"  scrape/eval {settings.scrape_interval}, watcher window {settings.window} "
        f"every {settings.interval_s:g} s, for x{settings.for_scale:g}, "
        f"group_wait {settings.group_wait}"
    )
    if result.flagged_before:
        print(
            f"false alarms before the injection: {len(result.flagged_before)} watcher runs, "
            f"up to {max(result.flagged_before):.2f}x (not counted)"
        )
    print(f"injection -> diagnosis: {result.to_diagnosis_s:.1f} s")
    print(f"injection -> receiver:  {result.to_receiver_s:.1f} s")
    print(
        f"diagnosis: node {f.node}, rank {', '.join(map(str, f.ranks))}, cause {f.cause}, "
        f"{f.ratio:.2f}x the other nodes' median step time, slow in {f.slow_fraction:.0%}"
    )
    print(
        f"receiver {result.receiver}: "
        + " ".join(f"{k}={v}" for k, v in sorted(result.alert.items()))
    )
    for receiver, labels in result.received:
        if labels.get("alertname") != "LlmpSlowNode":
            print(f"also received at {receiver}: {labels.get('alertname')} {labels}")
    print(f"(whole run {total:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
