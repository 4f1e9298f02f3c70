"""The stack config of the running Pulumi program, validated (engine or mocks)."""

from __future__ import annotations

from pulumi.runtime import config as runtime_config

from spec.platform import PlatformConfig
from spec.stackfile import load_config


def from_pulumi() -> PlatformConfig:
    """The validated config the engine (or the mock runtime) hands this program."""
    raw = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    secret_keys = {k for k in raw if runtime_config.is_config_secret(k)}
    secret_keys.update(runtime_config.get_config_secret_keys_env())
    return load_config(raw, secret_keys)
