"""Synth time of each stack against the time to merely import the Pulumi SDKs.

Each figure is the median of N fresh processes (cold imports every time):
  import:      `import pulumi, pulumi_aws, pulumi_kubernetes` (the SDKs load
               their service modules lazily, so this is the bare packages)
  sdk modules: the same plus every pulumi_aws / pulumi_kubernetes submodule a
               synth of the stack loads (found by running one), i.e. the SDK
               code any program declaring these resources must load
  synth:       `llmp synth STACK` in-process, end to end (imports, config,
               program under the mock runtime, plan and manifests written)
The target is synth <= 1.5 x import. Prints figures; asserts nothing.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
STACKS = ("pretrain", "finetune", "inference")

IMPORT = "import pulumi, pulumi_aws, pulumi_kubernetes"
SYNTH = """
import sys
from pathlib import Path
from llmp.plan.synth import synthesize_stack, write_plan
plan = synthesize_stack(sys.argv[1])
write_plan(plan, Path(sys.argv[2]))
"""


def timed(code: str, *args: str) -> float:
    start = time.perf_counter()
    # stderr dropped: a bare import of every SDK submodule leaves an event loop
    # that asyncio complains about at interpreter exit; the timing is unaffected.
    subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, check=True, stderr=subprocess.DEVNULL
    )
    return time.perf_counter() - start


def median(code: str, *args: str) -> float:
    timed(code, *args)  # warm the page cache and .pyc files
    return statistics.median(timed(code, *args) for _ in range(RUNS))


LOADED = """
import sys
from llmp.plan.synth import synthesize_stack
synthesize_stack(sys.argv[1])
print(" ".join(sorted(m for m in sys.modules
                      if m.startswith(("pulumi_aws.", "pulumi_kubernetes.")))))
"""


def sdk_modules(stack: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", LOADED, stack], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.split()
    return IMPORT + "\n" + "\n".join(f"import {m}" for m in out)


def main() -> None:
    base = median(IMPORT)
    print(f"import pulumi+pulumi_aws+pulumi_kubernetes: {base:.3f} s (median of {RUNS})")
    with tempfile.TemporaryDirectory() as out:
        for stack in STACKS:
            t = median(SYNTH, stack, out)
            sdk = median(sdk_modules(stack))
            print(
                f"synth {stack:<10} {t:.3f} s  ratio {t / base:.2f}x (target <= 1.50x)  |  "
                f"sdk modules it loads {sdk:.3f} s, synth/sdk {t / sdk:.2f}x"
            )


if __name__ == "__main__":
    main()
