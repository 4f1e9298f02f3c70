"""`python -m tests.workloads.training.slow_snapshot DELAY_S TRAIN_ARGS...`: the trainer
(`workloads.training.train`), with every asynchronous snapshot starting DELAY_S late.

For tests that need the copy of an asynchronous save to still be running when the
training loop reaches its next optimizer step, whatever the machine's speed.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from workloads.training import checkpointing, train


def main() -> int:
    delay_s = float(sys.argv.pop(1))
    copy = checkpointing.snapshot

    def late(obj: Any, **kwargs: Any) -> Any:
        time.sleep(delay_s)
        return copy(obj, **kwargs)

    checkpointing.snapshot = late
    return train.main()


if __name__ == "__main__":
    try:
        code = main()
    except SystemExit as exc:  # argparse's --help and usage errors
        code = exc.code if isinstance(exc.code, int) else 2
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # as train's own __main__: no interpreter teardown of gloo's threads
