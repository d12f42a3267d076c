"""Service configuration: flags > environment > config file > defaults; clear errors."""

from __future__ import annotations

import pytest

from cameo_actors.service.cli import build_parser
from cameo_actors.service.config import (
    ClientConfig,
    ServiceConfig,
    resolve_client_config,
    resolve_service_config,
)
from cameo_actors.service.errors import ConfigError


def test_precedence_flag_over_env_over_file_over_default(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg_file = tmp_path / "cameo.toml"
    cfg_file.write_text('[serve]\nport = 9100\npolicy = "edf"\npool = "from-file"\n'
                        'allowed_modules = ["jobs."]\n')
    env = {"CAMEO_POLICY": "fifo", "CAMEO_POOL": "from-env", "CAMEO_CONFIG": str(cfg_file)}
    cfg = resolve_service_config({"pool": "from-flag"}, env=env)
    assert cfg.pool == "from-flag"          # flag wins
    assert cfg.policy == "fifo"             # env beats the file
    assert cfg.port == 9100                 # file beats the default
    assert cfg.allowed_modules == ("jobs.",)
    assert cfg.host == "127.0.0.1"          # default
    assert cfg.embedded


def test_ray_address_falls_back_to_the_usual_variable() -> None:
    assert resolve_service_config({}, env={"RAY_ADDRESS": "10.1.2.3:6379"}).address == "10.1.2.3:6379"
    assert resolve_service_config({}, env={"RAY_ADDRESS": "10.1.2.3:6379",
                                           "CAMEO_RAY_ADDRESS": "h:1"}).address == "h:1"
    assert resolve_service_config({"address": "local"}, env={}).embedded


def test_token_limits_default_and_come_from_flags_or_the_environment() -> None:
    cfg = resolve_service_config({}, env={})
    assert (cfg.max_tokens_per_tenant, cfg.max_tokens) == (16, 1024)
    cfg = resolve_service_config({"max_tokens_per_tenant": "4"}, env={"CAMEO_MAX_TOKENS": "50"})
    assert (cfg.max_tokens_per_tenant, cfg.max_tokens) == (4, 50)
    with pytest.raises(ConfigError, match="max_tokens_per_tenant: expected >= 1, got 0"):
        resolve_service_config({"max_tokens_per_tenant": "0"}, env={})
    args = build_parser().parse_args(["serve", "--max-tokens-per-tenant", "3", "--max-tokens", "9"])
    assert (args.max_tokens_per_tenant, args.max_tokens) == ("3", "9")


def test_repeated_flag_and_comma_separated_variable() -> None:
    assert resolve_service_config({"allowed_modules": ["a.", "b."]}, env={}).allowed_modules == ("a.", "b.")
    assert resolve_service_config({}, env={"CAMEO_ALLOWED_MODULES": "x., y"}).allowed_modules == ("x.", "y")


def test_bad_values_name_their_origin_and_the_fix(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="CAMEO_PORT: expected"):
        resolve_service_config({}, env={"CAMEO_PORT": "eighty"})
    with pytest.raises(ConfigError, match="on_shutdown: expected one of"):
        resolve_service_config({"on_shutdown": "explode"}, env={})
    bad = tmp_path / "bad.toml"
    bad.write_text("[serve]\nprot = 1\n")
    with pytest.raises(ConfigError, match="prot"):
        resolve_service_config({"config": str(bad)}, env={})
    broken = tmp_path / "broken.toml"
    broken.write_text("[serve\n")
    with pytest.raises(ConfigError, match="valid TOML"):
        resolve_service_config({"config": str(broken)}, env={})
    with pytest.raises(ConfigError, match="at least 1024"):
        ServiceConfig(max_spec_bytes=10)


def test_admin_token_comes_from_the_environment_only() -> None:
    cfg = resolve_service_config({}, env={"CAMEO_ADMIN_TOKEN": " tok-123456 "})
    assert cfg.admin_token == "tok-123456"
    assert "tok-123456" not in repr(cfg)  # secrets stay out of logs


def test_state_paths_default_under_the_run_dir(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = ServiceConfig(run_dir=str(tmp_path))
    assert cfg.resolved_state_dir == str(tmp_path / "service")
    assert cfg.resolved_admin_token_file == str(tmp_path / "service" / "admin_token")


def test_client_token_resolution(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert ClientConfig(token=" given ").resolved_token() == "given"
    f = tmp_path / "tok"
    f.write_text("from-file\n")
    assert resolve_client_config({}, env={"CAMEO_TOKEN_FILE": str(f)}).resolved_token() == "from-file"
    (tmp_path / "service").mkdir()
    (tmp_path / "service" / "admin_token").write_text("local-admin\n")
    assert ClientConfig().resolved_token(run_dir=str(tmp_path)) == "local-admin"
    assert ClientConfig().resolved_token(run_dir=str(tmp_path / "nowhere")) is None
    with pytest.raises(ConfigError, match="readable file"):
        ClientConfig(token_file=str(tmp_path / "missing")).resolved_token()


def test_help_shows_every_environment_fallback() -> None:
    parser = build_parser()
    serve = parser._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    text = serve.format_help()
    for var in ("CAMEO_HOST", "CAMEO_PORT", "RAY_ADDRESS", "CAMEO_POLICY", "CAMEO_EXECUTORS",
                "CAMEO_ADMIN_TOKEN_FILE", "CAMEO_MAX_SPEC_BYTES", "CAMEO_ON_SHUTDOWN", "CAMEO_CONFIG"):
        assert var in text, var
    status = parser._subparsers._group_actions[0].choices["status"]  # type: ignore[union-attr]
    assert "CAMEO_URL" in status.format_help() and "CAMEO_TOKEN" in status.format_help()


# Makes `import ray` (and pyspark) fail in a fresh interpreter.
RAY_BLOCKER = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('ray', 'pyspark'):
            raise ImportError(f'{name} is blocked')
sys.meta_path.insert(0, Block())
"""


def test_cli_client_and_app_import_without_ray() -> None:
    """The client commands start fast and run where Ray is not installed; only `serve` needs Ray."""
    import subprocess
    import sys

    code = RAY_BLOCKER + (
        "import cameo_actors.service.cli, cameo_actors.service.client, cameo_actors.service.app\n"
        "import cameo_actors.service.core, cameo_actors.service.metrics, cameo_actors.service.server\n"
        "assert not any(m.split('.')[0] in ('ray', 'pyspark') for m in sys.modules)\n"
        "print('clean')\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "clean"
