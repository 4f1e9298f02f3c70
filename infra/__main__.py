"""The Pulumi program: stack config -> platform. Everything else lives in modules."""

import pulumi

from infra.config import ConfigError, from_pulumi
from infra.platform import build

try:
    config = from_pulumi()
except ConfigError as exc:
    # RunError: Pulumi prints the one line, without a Python traceback.
    raise pulumi.RunError(str(exc)) from None

build(config, pulumi.get_project(), pulumi.get_stack())
