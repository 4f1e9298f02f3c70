"""Reading AWS for the read-only checks: boto3 clients, and what an error means.

An emulator (moto, LocalStack) without an API answers in ways AWS would not: HTTP 500,
InternalFailure, a page botocore cannot parse, a bare 404 for a REST route it lacks.
`unsupported` tells those apart (only against an emulator: from AWS they are failures).
Credentials AWS refuses outright raise `CredentialsRejected` (bad input: nothing can be
checked with them); any other error of the API comes back from `read` for the caller to
report.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llmp.errors import BadInput

# Error codes of an API the endpoint does not have. Emulators also answer with a
# failure that from AWS would be transient: LocalStack InternalFailure "not yet
# implemented", moto's server a bare HTTP 500.
_UNSUPPORTED_CODES = frozenset(
    {"NotImplemented", "NotImplementedException", "UnknownOperationException"}
    | {"InvalidAction", "501"}
)
_EMULATOR_UNSUPPORTED_CODES = frozenset({"InternalFailure", "500"})
_REJECTED_CREDENTIAL_CODES = frozenset(
    {"UnrecognizedClientException", "InvalidClientTokenId", "ExpiredToken"}
    | {"ExpiredTokenException", "InvalidAccessKeyId", "AuthFailure"}
)


class CredentialsRejected(BadInput):
    """AWS refused the credentials themselves (expired token, unknown key): no check can run,
    so this is bad input for the whole run rather than a failed row per resource."""


def code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str((response.get("Error") or {}).get("Code", ""))


def _http_status(exc: Exception) -> int | None:
    response = getattr(exc, "response", None) or {}
    status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return status if isinstance(status, int) else None


def _is_client_error(exc: Exception) -> bool:
    return isinstance(getattr(exc, "response", None), dict)


def _is_unparsable_answer(exc: Exception) -> bool:
    """botocore could not parse the answer: an emulator's bare 500 page for an API it lacks."""
    from botocore.parsers import ResponseParserError

    return isinstance(exc, ResponseParserError)


def _is_unknown_route(exc: Exception) -> bool:
    """A bare HTTP 404 without an AWS error type: the server has no such REST route.

    AWS answers a missing EKS resource with a typed error (ResourceNotFoundException);
    an emulator without the API answers its web framework's 404 page.
    """
    if _http_status(exc) != 404 or code(exc) != "404":
        return False
    headers = (getattr(exc, "response", {}).get("ResponseMetadata") or {}).get("HTTPHeaders", {})
    return "x-amzn-errortype" not in headers


def unsupported(exc: Exception, emulated: bool = False) -> bool:
    """Whether `exc` says the endpoint does not implement the API called.

    An emulator (moto, LocalStack: `emulated`) may also answer HTTP 500, InternalFailure, a
    page botocore cannot parse, or a bare 404 for a REST route it lacks; from AWS itself,
    those are failures, not a missing API.
    """
    if isinstance(exc, NotImplementedError):
        return True
    if emulated and _is_unparsable_answer(exc):
        return True
    if not _is_client_error(exc):
        return False
    error, status = code(exc), _http_status(exc)
    if error in _UNSUPPORTED_CODES or status == 501:
        return True
    return emulated and (
        status == 500 or error in _EMULATOR_UNSUPPORTED_CODES or _is_unknown_route(exc)
    )


def raise_if_rejected(exc: Exception) -> None:
    """Raise CredentialsRejected when `exc` says the credentials themselves are refused."""
    if _is_client_error(exc) and code(exc) in _REJECTED_CREDENTIAL_CODES:
        raise CredentialsRejected(error_text(exc)) from None


def error_text(exc: Exception) -> str:
    if _is_client_error(exc):
        message = (getattr(exc, "response", {}).get("Error") or {}).get("Message", "")
        return f"{code(exc)}: {message}".strip(": ").splitlines()[0] if message else code(exc)
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


def read(call: Callable[..., Any], /, **kwargs: Any) -> tuple[Any, Exception | None]:
    """(response, None), or (None, the error) for an error of the API; anything else raises.
    Refused credentials raise CredentialsRejected: no row could be checked with them."""
    try:
        return call(**kwargs), None
    except Exception as exc:
        if not (
            _is_client_error(exc)
            or isinstance(exc, NotImplementedError)
            or _is_unparsable_answer(exc)
        ):
            raise
        raise_if_rejected(exc)
        return None, exc


def paginate(call: Callable[..., Any], key: str, **kwargs: Any) -> list[Any]:
    items: list[Any] = []
    token = None
    while True:
        resp = call(**kwargs, **({"NextToken": token} if token else {}))
        items.extend(resp.get(key) or [])
        token = resp.get("NextToken")
        if not token:
            return items


class ClientFactory:
    """Makes boto3 clients per (service, region) from one session, cached.

    Against an emulator (`endpoint_url`), a failed call is not retried: an API the
    emulator lacks answers 500, and retrying it only makes the report slow.
    """

    def __init__(self, session: Any, endpoint_url: str | None = None):
        from botocore.config import Config

        self.session = session
        self.endpoint_url = endpoint_url
        self.config = Config(
            retries={"mode": "standard", "total_max_attempts": 1 if endpoint_url else 3},
            connect_timeout=5 if endpoint_url else 20,
            read_timeout=30,
        )
        self._clients: dict[tuple[str, str], Any] = {}

    @property
    def emulated(self) -> bool:
        return self.endpoint_url is not None

    def __call__(self, service: str, region: str) -> Any:
        key = (service, region)
        if key not in self._clients:
            self._clients[key] = self.session.client(
                service, region_name=region, endpoint_url=self.endpoint_url, config=self.config
            )
        return self._clients[key]
