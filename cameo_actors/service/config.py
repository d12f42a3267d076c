"""Service and client configuration: typed, frozen, read once at the edge.

Each setting comes from, in order: a command-line flag, an environment
variable, the config file (TOML, `--config` / `CAMEO_CONFIG`), the default.
The `Option` tables below are the single source of the flags, the variables
and the `--help` text, so they cannot drift apart.

>>> cfg = resolve_service_config({"port": "9000"}, env={"CAMEO_POLICY": "fifo"})
>>> cfg.port, cfg.policy, cfg.host
(9000, 'fifo', '127.0.0.1')
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from cameo_actors.errors import UserError
from cameo_actors.operators.state_store import BACKENDS
from cameo_actors.runtime.config import ADMISSION_MODES, DELIVERY_MODES, RuntimeConfig
from cameo_actors.scaling import settings_from_dict
from cameo_actors.service.auth import MAX_TOKENS, MAX_TOKENS_PER_TENANT
from cameo_actors.service.errors import ConfigError

DEFAULT_PORT = 8470
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
SHUTDOWN_MODES = ("stop", "keep")
LOG_LEVELS = ("debug", "info", "warning", "error")
#: Deepest nesting of lists and objects a request body may have (specs nest about 5 deep).
DEFAULT_MAX_JSON_DEPTH = 64
MAX_JSON_DEPTH_RANGE = (8, 512)  # msgpack's unpacker stops at 1024 by itself
#: A new pool's settings by default: the runtime's own (`RuntimeConfig`'s field defaults),
#: so that the service's defaults and its --help cannot drift from them.
POOL_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(RuntimeConfig)
                                 if f.default is not MISSING}


def _pool_factory(name: str) -> Any:
    """The default factory of a `RuntimeConfig` field (a mutable default, as `scaling`)."""
    return next(f.default_factory for f in fields(RuntimeConfig) if f.name == name)


@dataclass(frozen=True)
class Option:
    """One setting: its config field, flag, environment variables and help."""

    name: str
    flag: str
    env: tuple[str, ...]
    help: str
    parse: Callable[[Any], Any] = str
    metavar: str | None = None
    repeat: bool = False  # the flag may be given several times (a list)


def _int(text: str) -> int:
    return int(str(text).strip())


def _float(text: str) -> float:
    return float(str(text).strip())


def _modules(text: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    items = text if isinstance(text, (list, tuple)) else str(text).split(",")
    return tuple(s.strip() for s in items if s and s.strip())


def _scaling(text: str | list[str] | tuple[str, ...]) -> dict[str, Any]:
    """Scaling settings from flags or a variable: KEY=VALUE items (commas separate them
    too), each value read as JSON (a number, true, false) or else as text.

    >>> _scaling(["policy=ds2,max_executors=4", "lessees=true"])
    {'policy': 'ds2', 'max_executors': 4, 'lessees': True}
    """
    items = [text] if isinstance(text, str) else list(text)
    out: dict[str, Any] = {}
    for item in (part.strip() for t in items for part in str(t).split(",")):
        if not item:
            continue
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"scaling: expected KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value.strip()
    return out


SERVE_OPTIONS: tuple[Option, ...] = (
    Option("host", "--host", ("CAMEO_HOST",), "address the HTTP API listens on (default 127.0.0.1)"),
    Option("port", "--port", ("CAMEO_PORT",), f"HTTP port (default {DEFAULT_PORT}; 0 picks a free one)",
           _int),
    Option("address", "--address", ("CAMEO_RAY_ADDRESS", "RAY_ADDRESS"),
           "Ray cluster to join (host:port of the head's GCS, or 'auto'); unset starts an "
           "embedded private Ray"),
    Option("node_ip", "--node-ip", ("CAMEO_NODE_IP",),
           "node address of the embedded Ray (default 127.0.0.1: loopback only)"),
    Option("num_cpus", "--num-cpus", ("CAMEO_NUM_CPUS",),
           "logical CPUs of the embedded Ray (default 4x the cores)", _int),
    Option("pool", "--pool", ("CAMEO_POOL",), "executor pool name (default 'default')"),
    Option("policy", "--policy", ("CAMEO_POLICY",),
           "scheduling policy of a new pool: cameo, fifo, edf, sjf, fair_share, token_bucket "
           f"(default {POOL_DEFAULTS['policy']})"),
    Option("executors", "--executors", ("CAMEO_EXECUTORS",),
           "executors in a new pool (default: one per core, embedded; one per CPU, joined)", _int),
    Option("max_windows_per_event", "--max-windows-per-event", ("CAMEO_MAX_WINDOWS_PER_EVENT",),
           "most windows one event may open in a new pool (a sliding window's size / slide); "
           f"specs asking more are refused (default {POOL_DEFAULTS['max_windows_per_event']})", _int),
    Option("bins", "--bins", ("CAMEO_BINS",),
           "key bins of every keyed step in a new pool: the unit of scaling and migration, "
           f"a power of two (default {POOL_DEFAULTS['bins']})", _int),
    Option("checkpoint_url", "--checkpoint-url", ("CAMEO_CHECKPOINT_URL",),
           "where a new pool keeps its checkpoints and registry: a folder, or a URL pyarrow.fs "
           "understands (s3://, gs://, hdfs://) (default: <run-dir>/checkpoints/<pool>; on a "
           "cluster of more than one node, name storage every node reaches)"),
    Option("ingress_log_dir", "--ingress-log-dir", ("CAMEO_INGRESS_LOG_DIR",),
           "the folder of a new pool's ingress logs (every accepted push is written there "
           "first) (default: <run-dir>/ingress/<pool>; on a cluster of more than one node, a "
           "folder every node mounts)"),
    Option("checkpoint_interval_s", "--checkpoint-interval", ("CAMEO_CHECKPOINT_INTERVAL_S",),
           "seconds between checkpoints of each dataflow in a new pool, unless its spec says "
           f"otherwise; 0: none, a dataflow then fails with its executor "
           f"(default {POOL_DEFAULTS['checkpoint_interval_s']:g})", _float),
    Option("replace_lost_after_s", "--replace-lost-after", ("CAMEO_REPLACE_LOST_AFTER_S",),
           "seconds a new pool waits for Ray to restart a lost executor (on a node with room) "
           "before it restores that executor's dataflows on the executors left and retires it "
           f"(default {POOL_DEFAULTS['replace_lost_after_s']:g})", _float),
    Option("delivery", "--delivery", ("CAMEO_DELIVERY",),
           "results of a new pool's dataflows, unless a spec says otherwise: exactly_once "
           "(readable once the checkpoint after them completed) or at_least_once (at once, "
           f"with ids) (default {POOL_DEFAULTS['delivery']})"),
    Option("state_backend", "--state-backend", ("CAMEO_STATE_BACKEND",),
           "where a new pool keeps the state of aligned windows, windowed joins and keyed "
           "processes: memory "
           "(Python objects on the executor's heap) or rocksdb (an embedded store per step "
           "instance on the node's disk, its hot entries cached; for state larger than memory "
           f"or fast restores) (default {POOL_DEFAULTS['state_backend']})"),
    Option("store_dir", "--store-dir", ("CAMEO_STORE_DIR",),
           "a local folder of each node where a new pool's rocksdb stores live (default: "
           "cameo-state in the system's temp folder)"),
    Option("standby_executors", "--standby-executors", ("CAMEO_STANDBY_EXECUTORS",),
           "empty executors a new pool keeps warm besides --executors: a lost executor's "
           "dataflows are restored on one at once instead of after Ray restarted it "
           f"(default {POOL_DEFAULTS['standby_executors']})", _int),
    Option("admission", "--admission", ("CAMEO_ADMISSION",),
           "what a submit predicted to make a dataflow miss its target gets in a new pool: "
           "admit (the prediction is only reported), warn (admitted, with warnings) or refuse "
           f"(409 with the reasons) (default {POOL_DEFAULTS['admission']})"),
    Option("scaling", "--scaling", ("CAMEO_SCALING",),
           "the scaling controller of a new pool, as KEY=VALUE: policy (off, ds2, threshold), "
           "min_executors, max_executors, max_parallelism, interval_s, rate_window_s, warmup_s, "
           "scale_down_window_s, target_utilization, lessees, ...; repeat the flag, or "
           "comma-separate (a [serve.scaling] table in the config file) (default policy=off: "
           "dataflows may still turn it on for themselves)", _scaling, metavar="KEY=VALUE",
           repeat=True),
    Option("tenant_floor", "--tenant-floor", ("CAMEO_TENANT_FLOOR",),
           "on: under overload every tenant gets at least its weighted share of each "
           "executor, deadline order within the spare capacity; off: deadline order alone "
           f"(default {'on' if POOL_DEFAULTS['tenant_floor'] else 'off'})"),
    Option("state_budget_bytes", "--state-budget-bytes", ("CAMEO_STATE_BUDGET_BYTES",),
           "a dataflow's operator state and unread results in a new pool, when its spec sets "
           f"no limits.state_bytes; over it the dataflow fails "
           f"(default {POOL_DEFAULTS['state_budget_bytes']})", _int),
    Option("max_state_bytes", "--max-state-bytes", ("CAMEO_MAX_STATE_BYTES",),
           "the largest limits.state_bytes a spec may ask for in a new pool "
           f"(default {POOL_DEFAULTS['max_state_bytes']})", _int),
    Option("state_disk_budget_bytes", "--state-disk-budget-bytes",
           ("CAMEO_STATE_DISK_BUDGET_BYTES",),
           "a dataflow's operator state on disk (the rocksdb backend's files) in a new pool, "
           "when its spec sets no limits.state_disk_bytes; over it the dataflow fails "
           f"(default {POOL_DEFAULTS['state_disk_budget_bytes']})", _int),
    Option("max_state_disk_bytes", "--max-state-disk-bytes", ("CAMEO_MAX_STATE_DISK_BYTES",),
           "the largest limits.state_disk_bytes a spec may ask for in a new pool "
           f"(default {POOL_DEFAULTS['max_state_disk_bytes']})", _int),
    Option("keep_ended_s", "--keep-ended", ("CAMEO_KEEP_ENDED_S",),
           "seconds a new pool keeps ended dataflows (finished, cancelled, failed) to be "
           f"seen, a finished one with its results (default {POOL_DEFAULTS['ended_retention_s']:g})", _float),
    Option("history_days", "--history-days", ("CAMEO_HISTORY_DAYS",),
           "days the service keeps ended dataflows' records (status, checkpoints, time "
           "line) in STATE_DIR/history, across restarts and after the pool forgot them "
           "(default 7)", _float),
    Option("history_kept", "--history-kept", ("CAMEO_HISTORY_KEPT",),
           "ended dataflows' records kept at most; the oldest go first (default 1000)", _int),
    Option("max_string_chars", "--max-string-chars", ("CAMEO_MAX_STRING_CHARS",),
           "longest str field value an event may carry in a new pool; longer ones go to the "
           f"error output (default {POOL_DEFAULTS['max_string_chars']})", _int),
    Option("tenant_max_concurrent", "--tenant-max-concurrent", ("CAMEO_TENANT_MAX_CONCURRENT",),
           "requests one tenant may have in flight; more get 429 (default 8)", _int),
    Option("tenant_rate", "--tenant-rate", ("CAMEO_TENANT_RATE",),
           "requests per second one tenant may send, in bursts of twice that; more get 429 "
           "(default 200)", _float),
    Option("allowed_modules", "--allow-module", ("CAMEO_ALLOWED_MODULES",),
           "module prefix that specs' Python functions may come from; repeat the flag, or "
           "comma-separate in the variable (default: none, only safe expressions)",
           _modules, metavar="PREFIX", repeat=True),
    Option("run_dir", "--run-dir", ("CAMEO_RUN_DIR",), "folder for Ray's files and service state "
           "(default ./.run)"),
    Option("state_dir", "--state-dir", ("CAMEO_STATE_DIR",),
           "folder for tokens (default RUN_DIR/service; user-only permissions)"),
    Option("admin_token_file", "--admin-token-file", ("CAMEO_ADMIN_TOKEN_FILE",),
           "file holding the admin token; generated at first start if missing "
           "(default STATE_DIR/admin_token). CAMEO_ADMIN_TOKEN gives the token itself"),
    Option("max_spec_bytes", "--max-spec-bytes", ("CAMEO_MAX_SPEC_BYTES",),
           "largest spec accepted, in bytes (default 262144)", _int),
    Option("max_body_bytes", "--max-body-bytes", ("CAMEO_MAX_BODY_BYTES",),
           "largest events batch accepted, in bytes (default 16777216)", _int),
    Option("max_json_depth", "--max-json-depth", ("CAMEO_MAX_JSON_DEPTH",),
           "deepest nesting of lists and objects in a request body, JSON or msgpack "
           f"(default {DEFAULT_MAX_JSON_DEPTH}; {MAX_JSON_DEPTH_RANGE[0]} to "
           f"{MAX_JSON_DEPTH_RANGE[1]})", _int),
    Option("max_tokens_per_tenant", "--max-tokens-per-tenant", ("CAMEO_MAX_TOKENS_PER_TENANT",),
           f"most tenant tokens one tenant may hold (default {MAX_TOKENS_PER_TENANT})", _int),
    Option("max_tokens", "--max-tokens", ("CAMEO_MAX_TOKENS",),
           f"most tenant tokens in all (default {MAX_TOKENS})", _int),
    Option("on_shutdown", "--on-shutdown", ("CAMEO_ON_SHUTDOWN",),
           "on SIGTERM: 'stop' drains and cancels the dataflows; 'keep' leaves them for the "
           "next service (running in a joined cluster; at their last checkpoint in the "
           "embedded Ray) (default stop)"),
    Option("drain_timeout_s", "--drain-timeout", ("CAMEO_DRAIN_TIMEOUT_S",),
           "seconds to let stopping dataflows finish their backlog (default 10)", _float),
    Option("log_level", "--log-level", ("CAMEO_LOG_LEVEL",), "debug, info, warning or error "
           "(default info)"),
)


@dataclass(frozen=True)
class ServiceConfig:
    """How `cameo serve` runs. Build it with `resolve_service_config`."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    address: str | None = None
    node_ip: str = "127.0.0.1"
    num_cpus: int | None = None
    pool: str = "default"
    # A new pool's settings: the runtime's defaults (`POOL_DEFAULTS`), under the service's names.
    policy: str = POOL_DEFAULTS["policy"]
    executors: int | None = None  # None: one per core (embedded) or per CPU (joined)
    max_windows_per_event: int = POOL_DEFAULTS["max_windows_per_event"]
    bins: int = POOL_DEFAULTS["bins"]
    checkpoint_url: str | None = POOL_DEFAULTS["checkpoint_url"]
    ingress_log_dir: str | None = POOL_DEFAULTS["ingress_log_dir"]
    checkpoint_interval_s: float = POOL_DEFAULTS["checkpoint_interval_s"]
    replace_lost_after_s: float = POOL_DEFAULTS["replace_lost_after_s"]
    delivery: str = POOL_DEFAULTS["delivery"]
    state_backend: str = POOL_DEFAULTS["state_backend"]
    standby_executors: int = POOL_DEFAULTS["standby_executors"]
    store_dir: str | None = POOL_DEFAULTS["store_dir"]
    admission: str = POOL_DEFAULTS["admission"]
    tenant_floor: str = "on" if POOL_DEFAULTS["tenant_floor"] else "off"
    scaling: dict[str, Any] = field(default_factory=_pool_factory("scaling"))
    state_budget_bytes: int = POOL_DEFAULTS["state_budget_bytes"]
    max_state_bytes: int = POOL_DEFAULTS["max_state_bytes"]
    state_disk_budget_bytes: int = POOL_DEFAULTS["state_disk_budget_bytes"]
    max_state_disk_bytes: int = POOL_DEFAULTS["max_state_disk_bytes"]
    keep_ended_s: float = POOL_DEFAULTS["ended_retention_s"]
    history_days: float = 7.0
    history_kept: int = 1000
    max_string_chars: int = POOL_DEFAULTS["max_string_chars"]
    tenant_max_concurrent: int = 8
    tenant_rate: float = 200.0
    allowed_modules: tuple[str, ...] = ()
    run_dir: str = ".run"
    state_dir: str | None = None
    admin_token_file: str | None = None
    admin_token: str | None = field(default=None, repr=False)
    max_spec_bytes: int = 256 * 1024
    max_body_bytes: int = 16 * 1024 * 1024
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    max_tokens_per_tenant: int = MAX_TOKENS_PER_TENANT
    max_tokens: int = MAX_TOKENS
    on_shutdown: str = "stop"
    drain_timeout_s: float = 10.0
    log_level: str = "info"

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError("port", "0..65535", self.port, "pick a free TCP port")
        for name in ("max_windows_per_event", "state_budget_bytes", "max_state_bytes",
                     "state_disk_budget_bytes", "max_state_disk_bytes", "max_string_chars", "tenant_max_concurrent", "tenant_rate"):
            if getattr(self, name) <= 0:
                raise ConfigError(name, "> 0", getattr(self, name), "give a positive limit")
        if not 1 <= self.bins <= 65536 or self.bins & (self.bins - 1):
            raise ConfigError("bins", "a power of two from 1 to 65536", self.bins,
                              "use e.g. 4096 (more bins: finer moves, a little more routing work)")
        if not (self.checkpoint_interval_s == 0 or 0.1 <= self.checkpoint_interval_s <= 3600):
            raise ConfigError("checkpoint_interval_s", "0 (none) or 0.1 to 3600 seconds",
                              self.checkpoint_interval_s, "use e.g. 2")
        if not self.replace_lost_after_s > 0:
            raise ConfigError("replace_lost_after_s", "> 0 seconds", self.replace_lost_after_s,
                              "use e.g. 20 (Ray declares a node dead after 15 s by default)")
        if self.delivery not in DELIVERY_MODES:
            raise ConfigError("delivery", f"one of {DELIVERY_MODES}", self.delivery,
                              "use exactly_once, or at_least_once for results at once")
        if not 0 <= self.standby_executors <= 16:
            raise ConfigError("standby_executors", "0 to 16", self.standby_executors,
                              "use 1: one spare per pool (on a cluster, about one per node)")
        if self.state_backend not in BACKENDS:
            raise ConfigError("state_backend", f"one of {BACKENDS}", self.state_backend,
                              "use memory (the default), or rocksdb for state larger than memory")
        if self.admission not in ADMISSION_MODES:
            raise ConfigError("admission", f"one of {ADMISSION_MODES}", self.admission,
                              "use warn (the default), admit or refuse")
        if self.tenant_floor not in ("on", "off"):
            raise ConfigError("tenant_floor", "on or off", self.tenant_floor,
                              "use on (the default) or off")
        if not isinstance(self.scaling, dict):
            raise ConfigError("scaling", "KEY=VALUE settings (a table in the config file)",
                              self.scaling, "e.g. --scaling policy=ds2 --scaling max_executors=4")
        try:
            settings_from_dict(self.scaling, where="scaling")
        except UserError as e:
            raise ConfigError(f"scaling {e.subject}", e.expected, e.got, e.fix) from e
        if self.keep_ended_s < 0:
            raise ConfigError("keep_ended_s", ">= 0", self.keep_ended_s, "use 0 to forget at once")
        if self.history_days < 0 or self.history_kept < 0:
            raise ConfigError("history_days" if self.history_days < 0 else "history_kept",
                              ">= 0", min(self.history_days, self.history_kept),
                              "use 0 to keep no history")
        for name in ("max_spec_bytes", "max_body_bytes"):
            if getattr(self, name) < 1024:
                raise ConfigError(name, "at least 1024 bytes", getattr(self, name),
                                  "raise the limit")
        lo, hi = MAX_JSON_DEPTH_RANGE
        if not lo <= self.max_json_depth <= hi:
            raise ConfigError("max_json_depth", f"{lo} to {hi} levels", self.max_json_depth,
                              f"keep the default {DEFAULT_MAX_JSON_DEPTH} unless events nest "
                              "deeper")
        if self.on_shutdown not in SHUTDOWN_MODES:
            raise ConfigError("on_shutdown", f"one of {SHUTDOWN_MODES}", self.on_shutdown,
                              "use 'stop' (drain and cancel) or 'keep' (leave running)")
        if self.log_level not in LOG_LEVELS:
            raise ConfigError("log_level", f"one of {LOG_LEVELS}", self.log_level,
                              "use one of those names")
        if self.executors is not None and self.executors < 1:
            raise ConfigError("executors", ">= 1", self.executors, "leave it unset for one per CPU")
        if self.drain_timeout_s < 0:
            raise ConfigError("drain_timeout_s", ">= 0", self.drain_timeout_s, "use 0 to not wait")
        for name in ("max_tokens_per_tenant", "max_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(name, ">= 1", getattr(self, name), "allow at least one token")

    @property
    def embedded(self) -> bool:
        """True when the service starts its own private Ray."""
        return not self.address

    @property
    def resolved_state_dir(self) -> str:
        return os.path.abspath(self.state_dir or os.path.join(self.run_dir, "service"))

    @property
    def resolved_admin_token_file(self) -> str:
        return os.path.abspath(self.admin_token_file
                               or os.path.join(self.resolved_state_dir, "admin_token"))


CLIENT_OPTIONS: tuple[Option, ...] = (
    Option("url", "--url", ("CAMEO_URL",), f"the service's address (default {DEFAULT_URL})"),
    Option("token", "--token", ("CAMEO_TOKEN",), "bearer token (prefer CAMEO_TOKEN or "
           "--token-file: a flag shows in `ps`)"),
    Option("token_file", "--token-file", ("CAMEO_TOKEN_FILE",),
           "file holding the token (default RUN_DIR/service/admin_token if readable)"),
    Option("timeout_s", "--timeout", ("CAMEO_TIMEOUT_S",), "seconds per request (default 30)",
           _float),
)


@dataclass(frozen=True)
class ClientConfig:
    """Where the CLI and the Python client find the service, and with which token."""

    url: str = DEFAULT_URL
    token: str | None = field(default=None, repr=False)
    token_file: str | None = None
    timeout_s: float = 30.0

    def resolved_token(self, run_dir: str | None = None) -> str | None:
        """The token to send: given, from the token file, or the local admin token file."""
        if self.token:
            return self.token.strip()
        path = self.token_file or os.path.join(run_dir or os.environ.get("CAMEO_RUN_DIR", ".run"),
                                               "service", "admin_token")
        try:
            with open(path, encoding="utf-8") as f:
                return f.read().strip() or None
        except FileNotFoundError:
            if self.token_file:
                raise ConfigError("token_file", "a readable file", self.token_file,
                                  "fix the path, or pass the token in CAMEO_TOKEN") from None
            return None
        except PermissionError:
            return None


def option_help(opt: Option) -> str:
    """The --help line of an option, with its environment fallbacks."""
    return f"{opt.help} [env: {', '.join(opt.env)}]"


def read_config_file(path: str, section: str = "serve") -> dict[str, Any]:
    """The `[serve]` table of a TOML file (or the top level, if it has no such table)."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError("config", "an existing TOML file", path, "fix the path") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("config", "valid TOML", f"{path}: {e}", "fix the file's syntax") from e
    table = data.get(section, data)
    if not isinstance(table, dict):
        raise ConfigError("config", f"a [{section}] table", type(table).__name__,
                          f"put the settings under [{section}]")
    return dict(table)


def _resolve(options: tuple[Option, ...], flags: Mapping[str, Any], env: Mapping[str, str],
             file: Mapping[str, Any]) -> dict[str, Any]:
    known = {o.name for o in options}
    unknown = sorted(set(file) - known)
    if unknown:
        raise ConfigError("config", f"keys among {sorted(known)}", unknown,
                          "remove or rename the unknown keys")
    values: dict[str, Any] = {}
    for opt in options:
        raw, origin = flags.get(opt.name), opt.flag
        if raw is None or raw == []:
            raw = None
            for var in opt.env:
                if env.get(var):
                    raw, origin = env[var], var
                    break
        if raw is None and opt.name in file:
            raw, origin = file[opt.name], f"config file key {opt.name!r}"
        if raw is None:
            continue
        try:
            values[opt.name] = opt.parse(raw) if isinstance(raw, (str, list, tuple)) else raw
        except (TypeError, ValueError) as e:
            raise ConfigError(origin, f"a value for {opt.help.split(' (')[0]!r}", raw,
                              "see `cameo serve --help` for the accepted values") from e
    return values


def resolve_service_config(flags: Mapping[str, Any], env: Mapping[str, str] | None = None,
                           ) -> ServiceConfig:
    """Flags > environment > config file > defaults. `flags` maps option names to values
    (None = not given); a "config" entry or CAMEO_CONFIG names the TOML file."""
    env = os.environ if env is None else env
    path = flags.get("config") or env.get("CAMEO_CONFIG")
    file = read_config_file(path) if path else {}
    values = _resolve(SERVE_OPTIONS, flags, env, file)
    if env.get("CAMEO_ADMIN_TOKEN"):
        values["admin_token"] = env["CAMEO_ADMIN_TOKEN"].strip()
    if values.get("address") in ("", "local"):
        values.pop("address")  # "local" is Ray's word for a private cluster: the embedded default
    known = {f.name for f in fields(ServiceConfig)}
    return ServiceConfig(**{k: v for k, v in values.items() if k in known})


def resolve_client_config(flags: Mapping[str, Any], env: Mapping[str, str] | None = None,
                          ) -> ClientConfig:
    env = os.environ if env is None else env
    return ClientConfig(**_resolve(CLIENT_OPTIONS, flags, env, {}))
