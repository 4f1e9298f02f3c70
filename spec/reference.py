"""The config reference: a Markdown table of every key, generated from the models."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from spec.base import is_model
from spec.keys import NAMESPACE, REGION_KEY
from spec.platform import PlatformConfig


def config_reference() -> str:
    """A Markdown table of every key, generated from the models (in docs/reference/config.md)."""
    rows = ["| key | type | default | description |", "|---|---|---|---|"]
    rows.append(
        f"| `{REGION_KEY}` | string | required | The region the stack deploys to: one that "
        "botocore knows, in any partition (aws, aws-cn, aws-us-gov, ...). |"
    )
    for name, info in PlatformConfig.model_fields.items():
        if name == "region":
            continue
        rows.extend(_rows(f"{NAMESPACE}:{name}", info))
    return "\n".join(rows) + "\n"


def _rows(key: str, info: FieldInfo) -> list[str]:
    annotation: Any = info.annotation
    args = [a for a in get_args(annotation) if a is not type(None)]
    optional = type(None) in get_args(annotation)
    if optional and len(args) == 1 and is_model(args[0]):
        annotation = args[0]  # an optional section: documented like a section
    origin = get_origin(annotation)
    nested: tuple[str, Any] | None = None
    if origin is dict and is_model(get_args(annotation)[1]):
        child = get_args(annotation)[1]
        kind, nested = f"map of name → {child.__name__}", (f"{key}.<name>", child)
    elif origin is list and is_model(get_args(annotation)[0]):
        child = get_args(annotation)[0]
        kind, nested = f"list of {child.__name__}", (f"{key}[]", child)
    elif is_model(annotation):
        child = annotation
        kind, nested = "section" + (" (optional)" if optional else ""), (key, child)
    if nested is None:
        return [f"| `{key}` | {_type_name(annotation)} | {_default(info)} | {_doc(info)} |"]
    prefix, child = nested
    doc = _doc(info) or (child.__doc__ or "").replace("\n", " ")
    doc = " ".join(doc.split())
    out = [f"| `{key}` | {kind} | {_default(info)} | {doc} |"]
    for sub, sub_info in child.model_fields.items():
        out.extend(_rows(f"{prefix}.{sub}", sub_info))
    return out


def _doc(info: FieldInfo) -> str:
    return (info.description or "").replace("|", "\\|")


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            return "see below"
    else:
        value = info.default
    if value is PydanticUndefined:
        return "required"
    return f"`{json.dumps(value)}`"


def _type_name(annotation: Any) -> str:
    origin = get_origin(annotation)
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in get_args(annotation))
    if origin is Annotated:
        return _type_name(get_args(annotation)[0])
    if origin in (list, dict) or (origin is not None and get_args(annotation)):
        args = [a for a in get_args(annotation) if a is not type(None)]
        inner = ", ".join(_type_name(a) for a in args)
        if origin is list:
            return f"list of {inner}"
        if origin is dict:
            return f"map of {inner}"
        suffix = " (optional)" if type(None) in get_args(annotation) else ""
        return inner + suffix
    return {str: "string", int: "integer", bool: "boolean", float: "number"}.get(
        annotation, getattr(annotation, "__name__", str(annotation))
    )
