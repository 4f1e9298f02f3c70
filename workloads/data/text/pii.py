"""PII redaction with compiled patterns; every replacement is counted per kind.

Kinds, in the order they are applied (an earlier kind's token hides its digits from a
later pattern, so an IP address is never also counted as a phone number):

- `private_key`: a PEM block `-----BEGIN ... PRIVATE KEY----- ... -----END ...`.
- `aws_access_key`: AWS key ids, a 4-letter type prefix (AKIA, ASIA, ...) and 16 more
  upper-case letters or digits (AWS's documented format).
- `aws_secret_key`: 40 base64 characters after a name like `aws_secret_access_key=`;
  a bare 40-character string is indistinguishable from a hash, so the name is required
  (the rule gitleaks uses). The name stays, the value goes.
- `api_key`: tokens with a vendor prefix that says what they are (GitHub `ghp_`...,
  Slack `xox?-`, Stripe `sk_live_`, Google `AIza`, Hugging Face `hf_`, OpenAI `sk-`),
  and 16+ character values after `api_key=`, `token:`, `secret=`, `password=`.
- `email`.
- `ipv6`: candidates checked with `ipaddress` (so `12:30:45` and `std::vector` stay).
- `ipv4`: four octets 0-255; not when glued to a letter, a hyphen or another dot-number,
  so version strings like `v1.2.3.4`, `1.2.3.4-beta` and `1.2.3.4.5` stay.
- `phone`: NANP numbers written with separators (`(555) 123-4567`, `555.123.4567`,
  `+1 555 123 4567`) and international numbers that start with `+` and a country code
  (8-15 digits, E.164's range). Bare digit runs are not phones: they are too often ids.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from contracts.text_pipeline import PiiConfig, PiiKind

_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"


@dataclass(frozen=True)
class _Rule:
    kind: PiiKind
    pattern: re.Pattern[str]
    group: int = 0
    """The group replaced (0: the whole match; 1: a value after its name)."""
    check: Callable[[str], bool] | None = None


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return any(c.isalnum() for c in text)


def _phone_digits(text: str) -> bool:
    return 8 <= sum(c.isdigit() for c in text) <= 15


RULES: tuple[_Rule, ...] = (
    _Rule(
        "private_key",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----.*?"
            r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----",
            re.DOTALL,
        ),
    ),
    _Rule(
        "aws_access_key",
        re.compile(
            r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)"
            r"[A-Z0-9]{16}(?![A-Za-z0-9])"
        ),
    ),
    _Rule(
        "aws_secret_key",
        re.compile(
            r"(?i:aws_?secret(?:_?access)?_?key|secret_?access_?key)[\"']?\s*[:=]\s*[\"']?"
            r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"
        ),
        group=1,
    ),
    _Rule(
        "api_key",
        re.compile(
            r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{40,}"
            r"|xox[abprs]-[A-Za-z0-9-]{10,}|sk_live_[A-Za-z0-9]{24,}|AIza[A-Za-z0-9_-]{35}"
            r"|hf_[A-Za-z0-9]{34}|sk-[A-Za-z0-9_-]{32,})(?![A-Za-z0-9_])"
        ),
    ),
    _Rule(
        "api_key",
        re.compile(
            r"(?i:api[_-]?key|access[_-]?token|auth[_-]?token|token|secret|password)"
            r"[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9_\-/+=.]{16,})"
        ),
        group=1,
    ),
    _Rule(
        "email",
        re.compile(
            r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,}"
            r"(?![\w-])"
        ),
    ),
    _Rule(
        "ipv6",
        re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])"),
        check=_is_ipv6,
    ),
    _Rule(
        "ipv4",
        re.compile(rf"(?<![\w.-])(?:{_OCTET}\.){{3}}{_OCTET}(?![\w-]|\.\d)"),
    ),
    _Rule(
        "phone",
        re.compile(
            r"(?<![\w+.-])(?:\+?1[ .-]?)?(?:\(\d{3}\) ?|\d{3}[ .-])\d{3}[ .-]\d{4}(?![\w-]|\.\d)"
        ),
    ),
    _Rule(
        "phone",
        re.compile(r"(?<![\w+])\+[1-9]\d{0,2}(?:[ .-]?\(?\d{1,4}\)?){2,5}(?![\w-]|\.\d)"),
        check=_phone_digits,
    ),
)


@lru_cache(maxsize=8)
def _active(kinds: tuple[PiiKind, ...]) -> tuple[_Rule, ...]:
    return tuple(rule for rule in RULES if rule.kind in kinds)


def redact(text: str, cfg: PiiConfig) -> tuple[str, dict[str, int]]:
    """(redacted text, replacements per kind, every configured kind present)."""
    counts: dict[str, int] = dict.fromkeys(cfg.kinds, 0)
    for rule in _active(cfg.kinds):
        token = cfg.replacements[rule.kind]

        def replace(match: re.Match[str], rule: _Rule = rule, token: str = token) -> str:
            value = match.group(rule.group)
            if rule.check is not None and not rule.check(value):
                return match.group(0)
            counts[rule.kind] += 1
            if rule.group == 0:
                return token
            start, end = match.span(rule.group)
            whole = match.group(0)
            offset = match.start(0)
            return whole[: start - offset] + token + whole[end - offset :]

        text = rule.pattern.sub(replace, text)
    return text, counts
