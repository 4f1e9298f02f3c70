"""`llmp loadtest` on the fake vLLM (`tests.llmp.fake_vllm`): shedding, routing, and a peer
client. Prints figures; asserts nothing.

Each section starts the fake in its own process on 127.0.0.1 (`python -m tests.llmp.fake_vllm`,
stopped by its PID, and by itself after its lifetime) and drives it with the library
`llmp loadtest` calls.

1. **Shedding.** One replica running 8 sequences (50 ms to the first token, 10 ms per
   token, 32 tokens: about 0.36 s a request, some 22 requests/s at most), Poisson
   arrivals at 40/s: without a guard the queue grows for the whole run; with the fake's
   429 above 12 in flight (the effect of the serving gateway's concurrency guard) the
   excess is refused and the accepted requests keep their TTFT.
2. **Routing.** 4 replicas, each with a prefix cache of 256 blocks of 16 tokens (4,096
   tokens), 8 shared prefixes of 1,024 words plus 64 words of each request's own, a
   prefill of 0.2 ms per uncached token: round-robin against `endpoint-picker`, our
   implementation of the Gateway API Inference Extension endpoint picker's default
   scoring (llmp.loadtest.routing). This measures that policy on the fake, not the real router.
3. **Peer client.** guidellm (when importable) and `llmp loadtest` at the same time, each
   against its own copy of the fake (TTFT = 20 ms + 0.4 ms per prompt token, 20 ms per
   token, 32 tokens), the same 30 prompts (normal lengths around 512 words, sd 128), one
   request at a time (a Poisson run compares the two clients' arrival draws and start-up
   more than their measurement); TTFT and ITL percentiles side by side. guidellm's ITL is
   per request (the mean gap after the first token), which is our `tpot_ms`.

    .venv/bin/python bench/loadtest.py [--only shed,routing,peer]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from llmp import loadtest as lt  # noqa: E402


@contextmanager
def fake(*args: str, lifetime: float = 300) -> Iterator[list[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.llmp.fake_vllm", "--lifetime", str(lifetime), *args],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        urls = json.loads(proc.stdout.readline())["urls"]
        yield urls
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(10)


def run(opts: lt.Options) -> lt.Report:
    return asyncio.run(lt.run(opts))


def shed() -> None:
    print("1. shedding: 1 replica, 8 running, Poisson 40/s, 400 requests")
    print(f"   {'guard':<18} {'accepted':>8} {'shed':>6} {'TTFT p50':>9} {'TTFT p99':>9} "
          f"{'goodput':>8}")  # fmt: skip
    for label, extra in (("none (queue)", []), ("429 above 12", ["--shed-above", "12"])):
        with fake("--ttft-ms", "50", "--itl-ms", "10", "--max-num-seqs", "8", *extra) as urls:
            r = run(lt.Options(urls[0], rate=40, requests=400, max_tokens=32, prompt_tokens=64,
                               goodput_ms={"ttft": 500}, timeout_s=120))  # fmt: skip
        print(f"   {label:<18} {r.accepted:>8} {r.shed:>6} {r.ttft_ms['p50']:>9.1f} "
              f"{r.ttft_ms['p99']:>9.1f} {r.goodput:>8.1%}")  # fmt: skip
    print("   (TTFT in ms, of the accepted requests; goodput: TTFT <= 500 ms, of all sent)")


def routing() -> None:
    print("2. routing: 4 replicas, 8 prefixes x 1024 words + 64 own, Poisson 20/s, 400")
    print(f"   {'policy':<16} {'TTFT p50':>9} {'TTFT p99':>9} {'prefix hits':>12} spread")
    for policy in ("round-robin", "endpoint-picker"):
        with fake("--replicas", "4", "--ttft-ms", "20", "--itl-ms", "10",
                  "--prefill-us-per-token", "200", "--cache-blocks", "256") as urls:  # fmt: skip
            r = run(lt.Options(urls[0], urls=tuple(urls[1:]), routing=policy, rate=20,
                               requests=400, max_tokens=16, prompt_tokens=64,
                               prefix_tokens=1024, prefix_groups=8, timeout_s=120))  # fmt: skip
        hits = "-" if r.prefix_hit_rate is None else f"{r.prefix_hit_rate:.1%}"
        print(f"   {policy:<16} {r.ttft_ms['p50']:>9.1f} {r.ttft_ms['p99']:>9.1f} {hits:>12} "
              f"{' '.join(map(str, r.per_replica))}")  # fmt: skip
    print("   (TTFT in ms; prefix hits: cached prompt tokens / prompt tokens, from usage)")


def _guidellm(url: str, data: Path, out: Path, n: int) -> subprocess.Popen[bytes]:
    """guidellm's run, started: read its answer with `_guidellm_answer` once it exits."""
    exe = shutil.which("guidellm", path=str(Path(sys.executable).parent)) or "guidellm"
    env = os.environ | {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.Popen(
        [exe, "run", "--backend", f"kind=openai_http,target={url}",
         "--data", f"kind=json_file,path={data}",
         "--profile", "kind=synchronous",
         "--constraint", f"kind=max_requests,count={n}",
         "--output", f"kind=json,path={out}", "--disable-console"],
        env=env, cwd=out.parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _guidellm_answer(proc: subprocess.Popen[bytes], out: Path) -> dict[str, Any]:
    code = proc.wait(600)
    if code != 0:
        raise RuntimeError(f"guidellm exited with {code}")
    metrics = json.loads(out.read_text())["benchmarks"][0]["metrics"]

    def pct(name: str) -> dict[str, float]:
        p = metrics[name]["successful"]["percentiles"]
        return {"p50": p["p50"], "p90": p["p90"], "p99": p["p99"]}

    return {"ttft": pct("time_to_first_token_ms"), "itl": pct("inter_token_latency_ms"),
            "requests": metrics["request_totals"]["successful"]}  # fmt: skip


def peer_comparison(n: int = 30, stdev: float = 128,
                    rounds: int = 1) -> list[tuple[str, float, float]]:  # fmt: skip
    """(metric, ours, guidellm's) for TTFT and ITL p50/p90/p99, on the same prompts, one
    request at a time (guidellm's `synchronous`, our concurrency 1).

    The two clients run at the same time, each against its own fake, so whatever else the
    host runs slows both alike. With several `rounds`, each figure is the least of its
    rounds for each client: contention on the host only ever adds to a latency, so the least
    is each client's reading closest to the fake's own timing, while a client that measures
    something else differs in every round."""
    opts = lt.Options("http://127.0.0.1", concurrency=1, requests=n, max_tokens=32,
                      prompt_tokens=512, prompt_tokens_stdev=stdev, seed=7,
                      timeout_s=120)  # fmt: skip
    prompts = lt.Prompts(opts)
    ours: dict[str, list[float]] = {}
    theirs: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "prompts.jsonl"
        data.write_text("".join(
            json.dumps({"prompt": " ".join(prompts.next()), "output_tokens_count": 32}) + "\n"
            for _ in range(n)
        ))  # fmt: skip
        args = ("--ttft-ms", "20", "--prefill-us-per-token", "400", "--itl-ms", "20",
                "--output-tokens", "32", "--cache-blocks", "0")  # fmt: skip
        for r in range(rounds):
            out = Path(tmp) / f"guidellm-{r}.json"
            with fake(*args) as ours_urls, fake(*args) as peer_urls:
                proc = _guidellm(peer_urls[0], data, out, n)
                try:
                    report = run(lt.Options(ours_urls[0], **{k: getattr(opts, k) for k in (
                        "concurrency", "requests", "max_tokens", "prompt_tokens",
                        "prompt_tokens_stdev", "seed", "timeout_s")}))  # fmt: skip
                    peer = _guidellm_answer(proc, out)
                finally:
                    if proc.poll() is None:
                        os.kill(proc.pid, signal.SIGTERM)
                        proc.wait(10)
            for q in ("p50", "p90", "p99"):
                ours.setdefault(f"TTFT {q} (ms)", []).append(report.ttft_ms[q] or 0.0)
                theirs.setdefault(f"TTFT {q} (ms)", []).append(peer["ttft"][q])
            for q in ("p50", "p90", "p99"):
                ours.setdefault(f"ITL {q} (ms)", []).append(report.tpot_ms[q] or 0.0)
                theirs.setdefault(f"ITL {q} (ms)", []).append(peer["itl"][q])
    return [(name, min(ours[name]), min(theirs[name])) for name in ours]


def peer() -> None:
    try:
        import guidellm  # noqa: F401
    except ImportError:
        print("3. peer client: skipped, guidellm is not importable")
        return
    from importlib.metadata import version

    print(f"3. peer client: guidellm {version('guidellm')}, same 30 prompts, one at a time,")
    print("   both at once, each on its own fake")
    print(f"   {'metric':<16} {'ours':>9} {'guidellm':>9} {'diff %':>7}")
    for name, ours, theirs in peer_comparison():
        diff = (ours - theirs) / theirs * 100 if theirs else float("nan")
        print(f"   {name:<16} {ours:>9.1f} {theirs:>9.1f} {diff:>+7.1f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="shed,routing,peer")
    wanted = p.parse_args().only.split(",")
    for name, fn in (("shed", shed), ("routing", routing), ("peer", peer)):
        if name in wanted:
            fn()


if __name__ == "__main__":
    main()
