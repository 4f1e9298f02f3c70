"""The Pulumi program: stack config -> platform. Everything else lives in modules."""

import pulumi

from program.config import from_pulumi
from program.platform import build
from spec.errors import ConfigError

try:
    config = from_pulumi()
except ConfigError as exc:
    # RunError: Pulumi prints the one line, without a Python traceback.
    raise pulumi.RunError(str(exc)) from None

build(config, pulumi.get_project(), pulumi.get_stack())
