"""Reading a stack: a Pulumi stack file's `config:` map, validated into `PlatformConfig`.

Bad config stops everything with one line per problem (`spec.errors`). A key
in a namespace the program does not read (`CONFIG_NAMESPACES`) is refused too:
a typo there would drop a whole section without a word. Decrypted secrets
never appear in a message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from spec.base import is_model
from spec.errors import (
    MISSING,
    SECRET_VALUE,
    ConfigError,
    FieldError,
    StackFileError,
    closest,
    kind_of,
    not_in,
    show,
)
from spec.keys import (
    AWS_PROVIDER_KEYS,
    CONFIG_NAMESPACES,
    GRAFANA_PASSWORD_KEY,
    MONITORING_SECRETS_NAMESPACE,
    NAMESPACE,
    PAGERDUTY_ROUTING_KEY,
    REGION_KEY,
    SERVING_KEYS_NAMESPACE,
    SLACK_WEBHOOK_KEY,
    monitoring_secret_key,
)
from spec.platform import PlatformConfig


def load_config(raw: Mapping[str, Any], secret_keys: Iterable[str] = ()) -> PlatformConfig:
    """Validate a flat Pulumi config map (`{"llm-platform:network": {...}, "aws:region": ...}`).

    Values may be objects (a stack file read as YAML) or JSON strings (what the
    Pulumi engine hands the program). Raises ConfigError, which reports every
    problem found: keys outside CONFIG_NAMESPACES first, then the schema's. The
    values of `secret_keys` (decrypted secrets) never appear in an error message.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError((), raw, "the stack config must be a map of key: value")
    data: dict[str, Any] = {}
    secrets = set(secret_keys)
    prefix = f"{NAMESPACE}:"
    problems: list[ConfigError] = []
    for key, value in raw.items():
        if not isinstance(key, str):
            continue  # not a Pulumi config key; load_stack_file names it
        if not key.startswith(prefix):
            problem = _foreign_key_problem(key, value, key in secrets or _is_secure(value))
            if problem is not None:
                problems.append(problem)
        if _is_secure(value) and (key.startswith(prefix) or key == REGION_KEY):
            path = ("region",) if key == REGION_KEY else (key[len(prefix) :],)
            raise ConfigError(
                path,
                SECRET_VALUE,
                f"is encrypted (secure:); {NAMESPACE} keys and {REGION_KEY} hold no secrets: "
                "set the value in plain text",
            )
        if key.startswith(prefix):
            data[key[len(prefix) :]] = _decode(value)
    if "region" in data:
        raise ConfigError(("region",), data["region"], f"set the region as {REGION_KEY}")
    if REGION_KEY in raw:
        data["region"] = _decode(raw[REGION_KEY])
    try:
        cfg = PlatformConfig.model_validate(data)
    except ValidationError as exc:
        # Refused keys first: a typo in a namespace is often why a section is missing.
        raise _redact(_joined([*problems, *_config_errors(exc)]), raw, secrets) from None
    except RecursionError:  # input nested past what pydantic walks
        raise ConfigError((), MISSING, "nested too deeply to be a stack config") from None
    problems += _serving_key_problems(raw, cfg)
    if problems:
        raise _redact(_joined(problems), raw, secrets)
    return cfg


_CREDENTIAL_LIKE = re.compile(r"(?i)secret|token|passw|credential|key")


def _foreign_key_problem(key: str, value: Any, secret: bool) -> ConfigError | None:
    """Why a config key outside the `llm-platform` schema is refused; None when accepted.

    The value is shown only where it cannot be a credential: a misspelt
    `aws:secretkey` must not print its secret.
    """
    namespace, colon, name = key.partition(":")
    shown = SECRET_VALUE if secret or _CREDENTIAL_LIKE.search(key) else _decode(value)
    if colon and namespace == "pulumi":
        return None
    if colon and namespace == "aws":
        if key == REGION_KEY:
            return None
        if name in AWS_PROVIDER_KEYS:
            return ConfigError(
                (),
                shown,
                "is not read: the program's AWS providers are explicit and take only "
                f"{REGION_KEY} from the stack file; give credentials, profiles and roles "
                "through the environment (AWS_PROFILE, AWS_ACCESS_KEY_ID, ...) and remove "
                "this key",
                config_key=key,
            )
        guess = closest(name, AWS_PROVIDER_KEYS)
        hint = f"did you mean aws:{guess}?" if guess else "see pulumi-aws's configuration keys"
        return ConfigError(
            (),
            shown,
            f"not a setting of Pulumi's AWS provider; {hint} (this program reads "
            f"{REGION_KEY} only)",
            config_key=key,
        )
    if colon and namespace in (SERVING_KEYS_NAMESPACE, MONITORING_SECRETS_NAMESPACE):
        if namespace == MONITORING_SECRETS_NAMESPACE and not monitoring_secret_key(name):
            return ConfigError(
                (),
                SECRET_VALUE,
                f"unknown key; the program reads {namespace}:{GRAFANA_PASSWORD_KEY}, "
                f"{SLACK_WEBHOOK_KEY}[-<team>] and {PAGERDUTY_ROUTING_KEY}[-<team>] only",
                config_key=key,
            )
        if not secret:
            return ConfigError(
                (),
                SECRET_VALUE,
                f"is a secret in plain text; set it with `pulumi config set --secret {key}`",
                config_key=key,
            )
        return None
    guess = _suggested_key(key)
    hint = f"; did you mean {guess}?" if guess else ""
    namespaces = ", ".join(sorted(CONFIG_NAMESPACES))
    what = f"unknown config namespace {namespace}" if colon else "not a namespace:name key"
    return ConfigError(
        (), shown, f"{what}{hint} (the namespaces read: {namespaces})", config_key=key
    )


def _suggested_key(key: str) -> str | None:
    """The accepted key a refused one most likely means (`llm_platform:tags` -> the real one)."""
    namespace, colon, name = key.partition(":")
    known = [
        *(f"{NAMESPACE}:{field}" for field in PlatformConfig.model_fields if field != "region"),
        REGION_KEY,
        f"{MONITORING_SECRETS_NAMESPACE}:{GRAFANA_PASSWORD_KEY}",
        *(f"aws:{name}" for name in sorted(AWS_PROVIDER_KEYS)),
    ]
    if not colon:  # `tags:` without its namespace
        by_name = {k.partition(":")[2]: k for k in reversed(known)}
        guess = closest(key, by_name)
        return by_name[guess] if guess else None
    guess = closest(key, known)
    if guess:
        return guess
    near = closest(namespace, CONFIG_NAMESPACES)
    return f"{near}:{name}" if near else None


def _serving_key_problems(raw: Mapping[str, Any], cfg: PlatformConfig) -> list[ConfigError]:
    """Keys under `llm-platform-serving:` that name no client: a key nobody ever uses."""
    clients = cfg.serving.api.clients if cfg.serving is not None else []
    problems = []
    for key in raw:
        if not isinstance(key, str) or not key.startswith(f"{SERVING_KEYS_NAMESPACE}:"):
            continue
        name = key.partition(":")[2]
        if name in clients:
            continue
        guess = closest(name, clients)
        hint = f"; did you mean {SERVING_KEYS_NAMESPACE}:{guess}?" if guess else ""
        problems.append(
            ConfigError(
                (),
                SECRET_VALUE,
                f"{not_in('client', 'serving.api.clients', clients)}{hint}; the gateway "
                "reads the key of each listed client only",
                config_key=key,
            )
        )
    return problems


def load_stack_file(path: str) -> dict[str, Any]:
    """Read the `config:` map of a Pulumi stack file.

    Raises StackFileError (a ConfigError: one line naming the file) when the
    file cannot be read, is not UTF-8 YAML, holds a key twice in one map, or is
    not a map with a `config:` map.
    """
    from spec import readers

    try:
        text = readers.read_text(path)
    except readers.ReadError as exc:
        raise StackFileError(exc.source, exc.problem) from None
    try:
        doc = readers.parse_yaml(text, path)
    except readers.ReadError as exc:
        raise StackFileError(path, exc.problem) from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise StackFileError(
            path, f"must be a map with a `config:` map, not {kind_of(doc)} at the top level"
        )
    for key in doc:
        if key not in STACK_FILE_KEYS:
            guess = closest(str(key), STACK_FILE_KEYS)
            hint = f"did you mean {guess}? " if guess else ""
            raise StackFileError(
                path,
                f"top-level key {show(key)} is not one of a Pulumi stack file's "
                f"({', '.join(STACK_FILE_KEYS)}); {hint}(a misspelt `config` drops "
                "every setting)",
            )
    config = doc.get("config")
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise StackFileError(path, f"`config:` must be a map of key: value, not {kind_of(config)}")
    for key in config:
        if not isinstance(key, str):
            raise StackFileError(
                path, f"config key {show(key)} is not a string like llm-platform:network"
            )
    return dict(config)


STACK_FILE_KEYS = ("config", "secretsprovider", "encryptedkey", "encryptionsalt", "environment")
"""The top-level keys of a Pulumi stack file (Pulumi.<stack>.yaml): its config, the secrets
provider's settings `pulumi stack init` writes, and the ESC environments it imports."""


def _is_secure(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"secure"}


def _redact(error: ConfigError, raw: Mapping[str, Any], secret_keys: set[str]) -> ConfigError:
    """Keep decrypted secrets out of the message: the value, and any text of it in `expected`."""
    present = [k for k in secret_keys if isinstance(k, str) and k in raw]
    if not present:
        return error
    prefix = f"{NAMESPACE}:"
    texts: set[str] = set()
    for key in present:
        _strings(raw[key], texts)
        _strings(_decode(raw[key]), texts)
    for each in error.errors:
        top = each.path[0] if each.path else None
        for key in present:
            name = "region" if key == REGION_KEY else key.removeprefix(prefix)
            if (key.startswith(prefix) or key == REGION_KEY) and top == name:
                each.value = SECRET_VALUE
            if each.config_key == key:
                each.value = SECRET_VALUE
        for text in sorted(texts, key=len, reverse=True):
            if len(text) >= 4:
                each.expected = each.expected.replace(text, "[secret]")
        if isinstance(each.value, str) and each.value in texts:
            each.value = SECRET_VALUE
    return error


def _strings(value: Any, out: set[str], depth: int = 0) -> None:
    if depth > 20:
        return
    if isinstance(value, str):
        out.add(value)
    elif isinstance(value, Mapping):
        for k, v in value.items():
            _strings(k, out, depth + 1)
            _strings(v, out, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out, depth + 1)
    elif value is not None and not isinstance(value, bool):
        out.add(str(value))


def _decode(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):  # not JSON, or JSON nested past the parser
            return value
    return value


def _config_errors(exc: ValidationError) -> list[ConfigError]:
    """Every problem pydantic found, as ConfigErrors, in the order it found them."""
    return [_config_error(e) for e in exc.errors()]


def _config_error(error: Any) -> ConfigError:
    path: tuple[str | int, ...] = tuple(error["loc"])
    value: Any = error.get("input", MISSING)
    expected = error["msg"]
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, FieldError):
        path += cause.path
        value = cause.value
        expected = cause.expected
    elif error["type"] == "value_error":
        expected = expected.removeprefix("Value error, ")
    elif error["type"] == "missing":
        value = MISSING
        expected = "required"
    elif error["type"] == "extra_forbidden":
        known = _known_keys(path[:-1])
        expected = f"unknown key; known keys here: {', '.join(known)}" if known else "unknown key"
    return ConfigError(path, value, expected)


def _joined(errors: list[ConfigError]) -> ConfigError:
    """One ConfigError that reports all of `errors` (not empty), the first first."""
    first, *others = errors
    first.others = [e for error in others for e in error.errors]
    return first


def _known_keys(path: tuple[str | int, ...]) -> list[str]:
    model: Any = PlatformConfig
    for part in path:
        fields: dict[str, FieldInfo] = getattr(model, "model_fields", {}) if is_model(model) else {}
        if isinstance(part, str) and part in fields:
            model = _model_of(fields[part].annotation)
        elif get_origin(model) is dict and get_args(model):
            model = _model_of(get_args(model)[1])
        elif get_origin(model) is list and get_args(model) and isinstance(part, int):
            model = _model_of(get_args(model)[0])
        else:
            return []
    if not is_model(model):
        return []
    return [k for k in model.model_fields if not (model is PlatformConfig and k == "region")]


def _model_of(annotation: Any) -> Any:
    if get_origin(annotation) in (dict, list):
        return annotation
    for arg in get_args(annotation) or (annotation,):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return annotation
