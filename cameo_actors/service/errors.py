"""Errors of the service layer: each maps to one HTTP status and one JSON body.

Every refusal names what was expected, what arrived and the fix, so a client
(the CLI, the Python client, curl) can show it as it is.
"""

from __future__ import annotations

import math
from typing import Any

from cameo_actors.errors import CameoError, ReconfigConflict, ReconfigError, SpecError, UserError
from cameo_actors.operators.exceptions import ColumnsRefused, ResultsNotColumnar
from cameo_actors.runtime.exceptions import DataflowEnded


class ConfigError(UserError):
    """A service or client setting is invalid (flag, environment variable or config file).

    The message opens with the setting's name as it is:

    >>> str(ConfigError("port", "0..65535", 70000, "pick a free TCP port"))
    'port: expected 0..65535, got 70000. Fix: pick a free TCP port'
    """

    @property
    def option(self) -> str:
        """The setting at fault ("port", "log_level", a file path, ...)."""
        return str(self.subject)


class TokenLimitError(UserError):
    """A tenant, or the whole service, holds as many tenant tokens as allowed; nothing was
    created. The fix is to revoke one (or raise the service's limit).

    >>> str(TokenLimitError("tenant 'ops'", "at most 16 tokens per tenant", "16 already",
    ...                     "revoke one"))
    "tenant 'ops': expected at most 16 tokens per tenant, got '16 already'. Fix: revoke one"
    """


class ApiError(CameoError):
    """A request the service refuses; nothing was changed. The server raises it, and
    the client raises it again from the response (as `ServiceError`).

    Attributes:
        status: the HTTP status (4xx for the caller's mistakes, 503 while stopping).
        code: a short stable word for programs ("unauthorized", "invalid_spec", ...).
        message: one sentence for people.
        expected, got, fix: what the service wanted, what it got, what to do.
        step: the dataflow step at fault, for spec errors.
        retry_after_s: for 429 / 503, when a retry may succeed (the Retry-After header).
        close_connection: answer with `Connection: close` (the rest of a too large body is
            not worth reading; the client connects again).
    """

    def __init__(self, status: int, code: str, message: str, *, expected: Any = None,
                 got: Any = None, fix: str | None = None, step: str | None = None,
                 retry_after_s: float | None = None, close_connection: bool = False) -> None:
        text = f"{message} (HTTP {status} {code})" if status else message
        if expected is not None:
            text += f"; expected {expected}, got {got!r}"
        if fix:
            text += f". Fix: {fix}"
        super().__init__(text)
        self.status = status
        self.code = code
        self.message = message
        self.expected = expected
        self.got = got
        self.fix = fix
        self.step = step
        self.retry_after_s = retry_after_s
        self.close_connection = close_connection

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        for key in ("step", "expected", "got", "fix"):
            value = getattr(self, key)
            if value is not None:
                plain = isinstance(value, (str, int, bool)) or (
                    isinstance(value, float) and math.isfinite(value))
                # NaN or Infinity as "got" (a refused number) would make the JSON answer fail.
                body[key] = value if plain else repr(value)
        return {"error": body}

    @classmethod
    def from_user_error(cls, e: UserError, status: int = 422, code: str = "invalid_spec"
                        ) -> ApiError:
        """The HTTP form of bad input: the same where, expected, got and fix."""
        step = e.subject if isinstance(e, SpecError) else None
        return cls(status, code, str(e), step=step, expected=e.expected, got=e.got, fix=e.fix)


def not_found(name: str) -> ApiError:
    # The same answer for "does not exist" and "belongs to another tenant": no leak.
    return ApiError(404, "not_found", f"no dataflow named {name!r} is visible to this token",
                    expected="the name of a running dataflow of your tenant", got=name,
                    fix="list your dataflows with `cameo list` (GET /v1/dataflows)")



def reconfig_refused(e: ReconfigError) -> ApiError:
    """A reconfiguration the runtime refused, nothing changed: 409 when it conflicts with
    one under way (or with the pool: its last executor), 422 when it cannot be done as asked.

    >>> reconfig_refused(ReconfigConflict("dataflow 'a'", "no migration under way",
    ...                                   "m1 running", "retry once m1 is done")).status
    409
    """
    if isinstance(e, ReconfigConflict):
        return ApiError.from_user_error(e, 409, "reconfiguration_conflict")
    return ApiError.from_user_error(e, 422, "bad_reconfiguration")


def ended(e: DataflowEnded, *, lost: bool = False) -> ApiError:
    """A dataflow that takes no events any more: 409, or 503 when a part of the pool died
    under it (not the caller's doing; a retry may work once it is restored)."""
    why = f" ({e.cause})" if e.cause else ""
    if lost:
        return ApiError(503, "dataflow_unavailable", f"dataflow {e.name!r} lost a part of the "
                        f"pool it ran on{why}", expected="a running dataflow", got=e.state,
                        fix="resubmit the dataflow (`cameo submit`); `cameo status NAME` shows "
                            "what happened", retry_after_s=5.0)
    return ApiError(409, "dataflow_ended", f"dataflow {e.name!r} is {e.state}{why}",
                    expected="a running dataflow", got=e.state,
                    fix="resubmit it to run it again (`cameo submit`); `cameo status NAME` shows "
                        "how it ended")


def not_columnar(e: ResultsNotColumnar) -> ApiError:
    """Results asked for as Arrow that do not form columns: 406 (they read as JSON)."""
    return ApiError.from_user_error(e, 406, "not_columnar")


def refused_columns(status: int, e: ColumnsRefused) -> ApiError:
    """Columns that do not fit a source's schema (400: not Arrow at all; 422: off the schema)."""
    return ApiError(status, "invalid_columns", str(e), expected=e.expected, got=e.got, fix=e.fix)
