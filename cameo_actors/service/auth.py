"""Bearer tokens of the RPC API: one admin token, and tenant tokens it creates.

The admin token is given (CAMEO_ADMIN_TOKEN or a file) or generated at first
start into a file only its user may read, like Ray's ~/.ray/auth_token.
Tenant tokens are kept as SHA-256 hashes only, in `tokens.json` (mode 0600):
a copy of the state folder does not give anyone a working tenant token.

>>> store = TokenStore(admin_token="s3cret")
>>> store.authenticate("Bearer s3cret").admin
True
>>> token, _ = store.create("ops")
>>> store.authenticate(f"Bearer {token}").tenant
'ops'
>>> store.authenticate("Bearer wrong") is None
True
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

from cameo_actors.service.errors import ApiError, ConfigError, TokenLimitError

TOKEN_PREFIX = "cameo_"
#: Defaults of the service's --max-tokens-per-tenant and --max-tokens: each token is checked
#: on every request and kept in tokens.json, so an admin script in a loop must hit a wall.
MAX_TOKENS_PER_TENANT = 16
MAX_TOKENS = 1024
TENANT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")  # the spec's tenant rule


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: the admin, or one tenant."""

    tenant: str | None
    admin: bool
    token_id: str

    def can_access(self, tenant: str) -> bool:
        """May this caller see and change a dataflow of `tenant`?"""
        return self.admin or tenant == self.tenant

    @property
    def label(self) -> str:
        return "admin" if self.admin else f"tenant {self.tenant!r}"


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_id(token_hash_hex: str) -> str:
    """A short public name of a token (to list and revoke it), not the secret."""
    return token_hash_hex[:12]


def write_private(path: str, text: str) -> None:
    """Write a file readable by its user only (0600), atomically, its folder 0700."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, mode=0o700, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o600)  # also when the file existed with wider bits
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_or_create_admin_token(path: str, given: str | None = None) -> tuple[str, bool]:
    """(token, generated): the given token, the one stored at `path`, or a new one stored there."""
    if given:
        return given, False
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
        if token:
            return token, False
    except FileNotFoundError:
        pass
    token = new_token()
    write_private(path, token + "\n")
    return token, True


class TokenStore:
    """Checks bearer tokens; creates, lists and revokes tenant tokens (thread-safe).

    Args:
        admin_token: the admin's token (sees and changes every tenant's dataflows).
        tenants_file: where tenant tokens' hashes persist; None keeps them in memory.
        max_per_tenant: most tokens one tenant may hold; `create` refuses beyond it.
        max_total: most tenant tokens in all. Tokens already stored beyond a lowered
            limit keep working; only new ones are refused.
    """

    def __init__(self, admin_token: str, tenants_file: str | None = None, *,
                 max_per_tenant: int = MAX_TOKENS_PER_TENANT,
                 max_total: int = MAX_TOKENS) -> None:
        if not admin_token or len(admin_token) < 8:
            raise ConfigError("admin_token", "at least 8 characters", "a shorter token",
                              "use a long random token, or let the service generate one")
        for name, limit in (("max_tokens_per_tenant", max_per_tenant), ("max_tokens", max_total)):
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise ConfigError(name, "an integer >= 1", limit, "allow at least one token")
        self._max_per_tenant = max_per_tenant
        self._max_total = max_total
        self._admin_hash = token_hash(admin_token)
        self._file = tenants_file
        self._lock = threading.Lock()
        self._tenants: dict[str, dict[str, Any]] = {}  # hash -> {"tenant", "created"}
        if tenants_file and os.path.exists(tenants_file):
            try:
                with open(tenants_file, encoding="utf-8") as f:
                    self._tenants = dict(json.load(f)["tokens"])
            except (ValueError, KeyError, TypeError) as e:
                raise ConfigError("tokens file", "the JSON that the service writes", tenants_file,
                                  "restore it from a backup or remove it (tenant tokens are "
                                  "then lost)") from e

    @classmethod
    def open(cls, state_dir: str, admin_token_file: str, admin_token: str | None = None, *,
             max_per_tenant: int = MAX_TOKENS_PER_TENANT, max_total: int = MAX_TOKENS,
             ) -> tuple[TokenStore, bool]:
        """The store of a service; (store, True) when the admin token was generated now."""
        token, generated = load_or_create_admin_token(admin_token_file, admin_token)
        store = cls(token, os.path.join(state_dir, "tokens.json"), max_per_tenant=max_per_tenant,
                    max_total=max_total)
        return store, generated

    def authenticate(self, authorization: str | None) -> Principal | None:
        """The caller of an `Authorization` header value, or None (missing or wrong)."""
        if not authorization:
            return None
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        h = token_hash(token)
        if hmac.compare_digest(h, self._admin_hash):
            return Principal(tenant=None, admin=True, token_id=token_id(h))
        record = self._tenants.get(h)
        if record is None:
            return None
        return Principal(tenant=record["tenant"], admin=False, token_id=token_id(h))

    def create(self, tenant: str) -> tuple[str, dict[str, Any]]:
        """A new token for `tenant`: (secret, public record). The secret is shown once.

        Raises:
            TokenLimitError: the tenant, or the service, holds as many tokens as allowed.
        """
        if not isinstance(tenant, str) or not TENANT_RE.match(tenant):
            raise ValueError(f"tenant: expected letters, digits, '_', '.', '-' (up to 128), "
                             f"got {tenant!r}")
        token = new_token()
        h = token_hash(token)
        record = {"tenant": tenant, "created": time.time()}
        with self._lock:  # count and add under one lock: two racing creates cannot both pass
            held = sum(1 for r in self._tenants.values() if r["tenant"] == tenant)
            if held >= self._max_per_tenant:
                raise TokenLimitError(
                    f"tenant {tenant!r}", f"at most {self._max_per_tenant} tokens per tenant",
                    f"{held} tokens already",
                    "revoke one with `cameo token revoke ID` (ids: `cameo token list`), or "
                    "raise the service's --max-tokens-per-tenant")
            if len(self._tenants) >= self._max_total:
                raise TokenLimitError(
                    "the service", f"at most {self._max_total} tenant tokens in all",
                    f"{len(self._tenants)} already",
                    "revoke unused ones with `cameo token revoke ID` (ids: `cameo token "
                    "list`), or raise the service's --max-tokens")
            self._tenants[h] = record
            self._save()
        return token, {"id": token_id(h), **record}

    def list(self) -> list[dict[str, Any]]:
        with self._lock:
            return [{"id": token_id(h), **r} for h, r in sorted(self._tenants.items(),
                                                                key=lambda kv: kv[1]["created"])]

    def revoke(self, tid: str) -> bool:
        """Forget the tenant token with this id; False if there is none."""
        with self._lock:
            hit = [h for h in self._tenants if token_id(h) == tid]
            for h in hit:
                del self._tenants[h]
            if hit:
                self._save()
            return bool(hit)

    def _save(self) -> None:
        if self._file:
            write_private(self._file, json.dumps({"tokens": self._tenants}, indent=1))


class TokenAdmin:
    """The token operations of the API over a `TokenStore`, with their refusals as the API
    says them. Only the admin reaches them (`operations.authorize`)."""

    def __init__(self, tokens: TokenStore) -> None:
        self.tokens = tokens

    def create(self, principal: Principal, tenant: str) -> dict[str, Any]:
        """A new token for `tenant`: its public record and, this once, the secret."""
        try:
            token, record = self.tokens.create(tenant)
        except TokenLimitError as e:  # 409: the request is fine, the tenant's token set is full
            raise ApiError(409, "token_limit", f"no new token for tenant {tenant!r}: "
                           f"{e.subject} holds as many tokens as allowed",
                           expected=e.expected, got=e.got, fix=e.fix) from None
        return {**record, "token": token}

    def list(self, principal: Principal) -> list[dict[str, Any]]:
        return self.tokens.list()

    def revoke(self, principal: Principal, token_id: str) -> dict[str, Any]:
        if not self.tokens.revoke(token_id):
            raise ApiError(404, "not_found", f"no tenant token with id {token_id!r}",
                           expected="an id from GET /v1/tokens", got=token_id,
                           fix="list the tokens with `cameo token list`")
        return {"id": token_id, "revoked": True}
