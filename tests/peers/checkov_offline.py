"""Run checkov with the network cut off: `python checkov_offline.py CHECKOV-ARGS...`.

Checkov asks PyPI for a newer version as soon as `checkov.main` is imported
(`checkov.common.util.banner`), whatever its flags say; `--skip-download`
and `BC_SKIP_MAPPING=TRUE` only stop the Prisma Cloud calls. This wrapper
replaces the update check with a no-op and makes every socket connection and
name lookup fail, writing `NETWORK-ATTEMPT: <where>` to stderr so the test
can assert that no call was even attempted.
"""

from __future__ import annotations

import socket
import sys
from typing import Any, NoReturn

MARKER = "NETWORK-ATTEMPT"


def _refuse(what: str, *args: Any) -> NoReturn:
    target = args[0] if args else ""
    print(f"{MARKER}: {what} {target!r}", file=sys.stderr, flush=True)
    raise OSError(f"network disabled for checkov ({what} {target!r})")


def _cut_network() -> None:
    def connect(self: socket.socket, address: Any) -> None:
        if self.family == socket.AF_UNIX:  # local IPC (multiprocessing), not the network
            return _connect(self, address)
        _refuse("connect", address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        if self.family == socket.AF_UNIX:
            return _connect_ex(self, address)
        _refuse("connect", address)

    _connect, _connect_ex = socket.socket.connect, socket.socket.connect_ex
    socket.socket.connect = connect  # type: ignore[method-assign]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = lambda *a, **k: _refuse("getaddrinfo", *a)
    socket.gethostbyname = lambda *a, **k: _refuse("gethostbyname", *a)
    socket.create_connection = lambda *a, **k: _refuse("create_connection", *a)


def main() -> int:
    _cut_network()
    # The banner module calls check_for_update at import time: stub it first.
    from checkov.common import version_manager

    version_manager.check_for_update = lambda package, version: None

    from checkov.main import Checkov

    return Checkov(argv=sys.argv[1:]).run() or 0


if __name__ == "__main__":
    sys.exit(main())
