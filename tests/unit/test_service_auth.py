"""Bearer tokens: admin and tenant tokens, hashed storage, user-only files."""

from __future__ import annotations

import json
import os
import stat

import pytest

from cameo_actors.service.auth import TokenStore, load_or_create_admin_token, write_private
from cameo_actors.service.errors import ConfigError, TokenLimitError


def mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_admin_token_is_generated_once_with_user_only_permissions(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "state" / "admin_token")
    token, generated = load_or_create_admin_token(path)
    assert generated and len(token) > 30
    assert mode(path) == 0o600
    assert mode(str(tmp_path / "state")) == 0o700
    again, generated_again = load_or_create_admin_token(path)
    assert (again, generated_again) == (token, False)
    given, gen = load_or_create_admin_token(str(tmp_path / "other"), "given-token")
    assert (given, gen) == ("given-token", False)
    assert not (tmp_path / "other").exists()  # a given token is not written anywhere


def test_write_private_narrows_an_existing_wide_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "f"
    path.write_text("old")
    os.chmod(path, 0o644)
    write_private(str(path), "new")
    assert path.read_text() == "new" and mode(str(path)) == 0o600


def test_authenticate_admin_tenant_missing_and_wrong(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store, _ = TokenStore.open(str(tmp_path), str(tmp_path / "admin_token"), "admin-secret-1")
    admin = store.authenticate("Bearer admin-secret-1")
    assert admin is not None and admin.admin and admin.can_access("anyone")
    token, record = store.create("ops")
    ops = store.authenticate(f"bearer {token}")
    assert ops is not None and not ops.admin and ops.tenant == "ops"
    assert ops.can_access("ops") and not ops.can_access("analytics")
    assert record["tenant"] == "ops" and record["id"] == ops.token_id
    for bad in (None, "", "Bearer", "Bearer wrong", f"Basic {token}", token, "Bearer admin-secret-"):
        assert store.authenticate(bad) is None, bad


def test_tenant_tokens_persist_as_hashes_and_can_be_revoked(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store, _ = TokenStore.open(str(tmp_path), str(tmp_path / "admin_token"), "admin-secret-1")
    token, record = store.create("ops")
    path = tmp_path / "tokens.json"
    assert mode(str(path)) == 0o600
    assert token not in path.read_text()  # only the hash is stored
    reopened, _ = TokenStore.open(str(tmp_path), str(tmp_path / "admin_token"), "admin-secret-1")
    assert reopened.authenticate(f"Bearer {token}") is not None
    assert [t["id"] for t in reopened.list()] == [record["id"]]
    assert reopened.revoke(record["id"]) and not reopened.revoke(record["id"])
    assert reopened.authenticate(f"Bearer {token}") is None
    assert json.loads(path.read_text()) == {"tokens": {}}


def test_bad_tenant_names_and_short_admin_tokens_are_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = TokenStore("admin-secret-1")
    with pytest.raises(ValueError, match="tenant: expected"):
        store.create("no spaces")
    with pytest.raises(ConfigError, match="at least 8"):
        TokenStore("short")
    (tmp_path / "tokens.json").write_text("{not json")
    with pytest.raises(ConfigError, match="tokens file"):
        TokenStore("admin-secret-1", str(tmp_path / "tokens.json"))


def test_tokens_per_tenant_are_bounded_and_revoking_one_makes_room(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store, _ = TokenStore.open(str(tmp_path), str(tmp_path / "admin_token"), "admin-secret-1",
                               max_per_tenant=2, max_total=10)
    first, record = store.create("ops")
    store.create("ops")
    with pytest.raises(TokenLimitError) as e:
        store.create("ops")
    assert e.value.subject == "tenant 'ops'" and e.value.got == "2 tokens already"
    assert "at most 2 tokens per tenant" in str(e.value)
    assert "cameo token revoke ID" in e.value.fix
    assert len(store.list()) == 2  # the refused token was not stored (nor written)
    assert len(json.loads((tmp_path / "tokens.json").read_text())["tokens"]) == 2
    store.create("analytics")  # the limit counts each tenant's own tokens
    assert store.revoke(record["id"])
    assert store.authenticate(f"Bearer {first}") is None
    store.create("ops")  # room again


def test_total_tokens_are_bounded_and_a_lowered_limit_keeps_existing_tokens(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store, _ = TokenStore.open(str(tmp_path), str(tmp_path / "admin_token"), "admin-secret-1",
                               max_per_tenant=5, max_total=3)
    tokens = [store.create(t)[0] for t in ("a", "b", "c")]
    with pytest.raises(TokenLimitError, match="at most 3 tenant tokens in all") as e:
        store.create("d")
    assert e.value.subject == "the service" and "--max-tokens" in e.value.fix
    lowered, _ = TokenStore.open(str(tmp_path), str(tmp_path / "admin_token"), "admin-secret-1",
                                 max_per_tenant=1, max_total=2)
    assert all(lowered.authenticate(f"Bearer {t}") is not None for t in tokens)
    with pytest.raises(TokenLimitError, match="tenant 'a'"):
        lowered.create("a")


@pytest.mark.parametrize("limits", [{"max_per_tenant": 0}, {"max_total": -1},
                                    {"max_per_tenant": 1.5}, {"max_total": True}])
def test_token_limits_must_be_positive_integers(limits: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="expected an integer >= 1"):
        TokenStore("admin-secret-1", **limits)  # type: ignore[arg-type]
