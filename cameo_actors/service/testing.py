"""A kit for end-to-end tests and benchmarks of the service on one machine:
`cameo serve` as a real subprocess, the service's app in a thread over a runtime the test
holds (`ServedApp`), the real `cameo` command, and a multi-node Ray cluster made of
`ray start` processes on loopback addresses.

Everything listens on the loopback range only. Processes are stopped by the
ids this kit started (never `ray stop`, which would end every Ray on the host).

>>> from cameo_actors.service.testing import ServiceProcess
>>> with ServiceProcess(run_dir=".run/try") as svc:       # doctest: +SKIP
...     print(svc.cli("list").stdout)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from cameo_actors.runtime.config import RAY_SYSTEM_CONFIG, ray_temp_dir
from cameo_actors.service.auth import new_token, write_private


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (for a server started next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def cameo_command() -> list[str]:
    """The installed `cameo` console script of this interpreter, or `python -m`."""
    script = os.path.join(os.path.dirname(sys.executable), "cameo")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "cameo_actors.service.cli"]


def _wait_for(path: str, needle: str, timeout_s: float, proc: subprocess.Popen[Any] | None = None
              ) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                if needle in f.read():
                    return
        except FileNotFoundError:
            pass
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.2)
    with open(path, encoding="utf-8", errors="replace") as f:
        tail = f.read()[-3000:]
    raise TimeoutError(f"{needle!r} did not appear in {path} within {timeout_s} s "
                       f"(exit code {proc.poll() if proc else None}):\n{tail}")


def _stop(proc: subprocess.Popen[Any], timeout_s: float) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return int(proc.returncode)


class ServiceProcess:
    """`cameo serve` in a subprocess, its log in RUN_DIR/serve-N.log, and the `cameo` CLI
    pointed at it (CAMEO_URL, CAMEO_RUN_DIR: the admin token is found by default).

    Args:
        run_dir: the service's run folder (Ray files, tokens, logs).
        args: extra `cameo serve` flags.
        env: extra environment for the service and the CLI.
        port: the HTTP port (default: a free one).
        cwd: the service's working folder (default: this one), so that modules of the
            project (e.g. user functions under `--allow-module`) import on the executors.
    """

    def __init__(self, run_dir: str, args: Sequence[str] = (), env: dict[str, str] | None = None,
                 port: int | None = None, cwd: str | None = None) -> None:
        self.run_dir = os.path.abspath(run_dir)
        self.cwd = os.path.abspath(cwd or os.getcwd())
        os.makedirs(self.run_dir, exist_ok=True)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = list(args)
        self.env = {**os.environ, "CAMEO_RUN_DIR": self.run_dir, "CAMEO_URL": self.url,
                    **(env or {})}
        for var in ("CAMEO_TOKEN", "CAMEO_TOKEN_FILE"):
            self.env.pop(var, None)  # the CLI uses the service's admin token unless told
        # The service decides Ray's loopback switch itself (embedded: on; joined: off).
        self.env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.log_path = ""

    def start(self, timeout_s: float = 120.0) -> ServiceProcess:
        self.starts += 1
        self.log_path = os.path.join(self.run_dir, f"serve-{self.starts}.log")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [*cameo_command(), "serve", "--port", str(self.port), *self.args],
                stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd)
        _wait_for(self.log_path, "serving the API", timeout_s, self.proc)
        return self

    @property
    def admin_token(self) -> str:
        with open(os.path.join(self.run_dir, "service", "admin_token"), encoding="utf-8") as f:
            return f.read().strip()

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def client(self, token: str | None = None) -> Any:
        from cameo_actors.service.client import Client

        return Client(self.url, token or self.admin_token)

    def cli(self, *args: str, token: str | None = None, check: bool = True,
            timeout_s: float = 60.0, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run `cameo ARGS` against this service; check=True raises on a non-zero exit."""
        env = dict(self.env)
        if token is not None:
            env["CAMEO_TOKEN"] = token
        run = subprocess.run([*cameo_command(), *args], capture_output=True, text=True, env=env,
                             timeout=timeout_s, cwd=self.cwd, input=stdin)
        if check and run.returncode != 0:
            raise AssertionError(f"cameo {' '.join(args)} exited {run.returncode}:\n"
                                 f"{run.stdout}\n{run.stderr}")
        return run

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM (graceful: drains and cancels dataflows); returns the exit code."""
        return _stop(self.proc, timeout_s) if self.proc else 0

    def kill(self) -> None:
        """SIGKILL: a crash. The detached controller of a joined cluster survives it."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> ServiceProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


#: Ray's health checks of a test cluster: a node that stops answering is declared dead
#: after about 3 s instead of Ray's 15 (3 s x 5), so that a lost node's executors are
#: restarted elsewhere, and recovery begins, within a test's time. A real cluster keeps
#: Ray's defaults or sets its own (docs/service.md, "When a node dies").
NODE_DEATH_CONFIG = {"health_check_period_ms": 1000, "health_check_timeout_ms": 1000,
                     "health_check_failure_threshold": 3}


class ServedApp:
    """The service's app (the API and the console's files over a `ServiceCore` over `rt`)
    under uvicorn, in a thread of this process, on a free loopback port: a test drives the
    runtime it holds and the service at once. `admin` is the admin token."""

    def __init__(self, rt: Any) -> None:
        import uvicorn

        from cameo_actors.service.app import create_app
        from cameo_actors.service.auth import TokenStore
        from cameo_actors.service.core import ServiceCore

        self.admin = new_token()
        self.tokens = TokenStore(self.admin)
        app = create_app(ServiceCore(rt), self.tokens, snapshot=rt.stats_all)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                                    log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> ServedApp:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise TimeoutError(f"the service did not start on {self.url}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


class LocalCluster:
    """A Ray cluster of `ray start --block` processes on loopback addresses of this machine:
    a head on 127.0.0.2 and workers on 127.0.0.3, .4, ... (Ray replaces 127.0.0.1 itself
    by the host's network address, other loopback addresses it keeps).

    Ray's token auth stays on: a token is written to RUN_DIR/ray_auth_token (user-only)
    and handed to every process through RAY_AUTH_TOKEN_PATH, with RAY_AUTH_MODE=token;
    `env` carries both for the service that joins, and Ray's settings for cameo.

    Args:
        run_dir: folder for Ray's session files and the nodes' logs.
        cpus: logical CPUs per node, head first (e.g. (1, 2): a head with 1, a worker with 2).
    """

    def __init__(self, run_dir: str, cpus: Sequence[int] = (1, 2),
                 autoscale: tuple[int, int] | None = None) -> None:
        if not cpus:
            raise ValueError("cpus: expected at least one node (the head), got ()")
        self.run_dir = os.path.abspath(run_dir)
        self.cpus = list(cpus)
        self.port = free_port()
        self.head_ip = "127.0.0.2"
        self.address = f"{self.head_ip}:{self.port}"
        token_path = os.path.join(self.run_dir, "ray_auth_token")
        os.makedirs(self.run_dir, exist_ok=True)
        if not os.path.exists(token_path):
            write_private(token_path, new_token())
        # Ray's settings as a local Ray gets them (`config.RAY_SYSTEM_CONFIG`), as variables.
        self.env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": token_path,
                    **{f"RAY_{k}": str(v) for k, v in {**RAY_SYSTEM_CONFIG,
                                                        **NODE_DEATH_CONFIG}.items()}}
        #: node number (0: the head; its address 127.0.0.{2 + number}) -> its `ray start`
        self.nodes: dict[int, subprocess.Popen[bytes]] = {}
        self._added = 0
        self.autoscale = autoscale

    def _ray(self, *args: str, log_name: str, own: str | None = None,
             netns: str | None = None) -> subprocess.Popen[bytes]:
        ray = os.path.join(os.path.dirname(sys.executable), "ray")
        cmd = [ray] if os.path.exists(ray) else [sys.executable, "-m", "ray.scripts.scripts"]
        if netns is not None:  # the node's processes on a network of their own
            cmd = ["ip", "netns", "exec", netns, *cmd]
        if own is not None:  # the node's processes see a folder of their own at `own`
            os.makedirs(own, exist_ok=True)
            cmd = ["unshare", "--mount", "--", "sh", "-c",
                   'mount -t tmpfs cameo-own "$1" && shift && exec "$@"', "sh", own, *cmd]
        log_path = os.path.join(self.run_dir, log_name)
        with open(log_path, "wb") as log:
            # No drain wait on SIGTERM: a test cluster goes down at once (Ray waits 30 s).
            env = {**os.environ, **self.env, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
                   "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}  # a multi-node cluster, on purpose
            if self.autoscale is not None and "--head" in args:
                # The autoscaler's nodes take the address Ray finds for this machine:
                # loopback (127.0.0.1) with this off. The head keeps the address it is given.
                env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
            proc = subprocess.Popen([*cmd, "start", "--block", "--disable-usage-stats",
                                     "--object-store-memory", str(150 * 1024 * 1024), *args],
                                    stdout=log, stderr=subprocess.STDOUT, env=env)
        _wait_for(log_path, "block forever", 120.0, proc)
        return proc

    def start(self) -> LocalCluster:
        self.nodes[0] = self._ray(
            "--head", f"--node-ip-address={self.head_ip}", f"--port={self.port}",
            f"--num-cpus={self.cpus[0]}", "--include-dashboard=false",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--temp-dir={ray_temp_dir(self.run_dir)}", *self._autoscaler(), log_name="head.log")
        for n in self.cpus[1:]:
            self.add_node(n)
        return self

    def _autoscaler(self) -> list[str]:
        """With `autoscale` (CPUs per node, most nodes): Ray's autoscaler on the head with
        its fake multi-node provider, which starts worker nodes on this machine when
        Ray is asked for resources it lacks (`request_resources`, pending actors)."""
        if self.autoscale is None:
            return []
        cpus, most = self.autoscale
        config = {
            "cluster_name": "cameo-test", "max_workers": most, "upscaling_speed": 1.0,
            "idle_timeout_minutes": 60, "head_node_type": "ray.head.default",
            "provider": {"type": "fake_multinode", "gcs_address": self.address,
                         "use_node_id_as_ip": True, "disable_node_updaters": True,
                         "disable_launch_config_check": True},
            "available_node_types": {
                # (the provider names the head's type so)
                "ray.head.default": {"resources": {"CPU": self.cpus[0]}, "node_config": {},
                                     "max_workers": 0},
                "worker": {"resources": {"CPU": cpus}, "node_config": {}, "min_workers": 0,
                           "max_workers": most}},
            "auth": {"ssh_user": "nobody"}, "file_mounts": {}, "cluster_synced_files": [],
            "file_mounts_sync_continuously": False, "initialization_commands": [],
            "setup_commands": [], "head_setup_commands": [], "worker_setup_commands": [],
            "head_start_ray_commands": [], "worker_start_ray_commands": []}
        path = os.path.join(self.run_dir, "autoscaler.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(config, f)
        self.env.update({"RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1"})
        return [f"--autoscaling-config={path}"]

    def add_node(self, cpus: int, own: str | None = None) -> int:
        """A worker node more, with `cpus` logical CPUs; its number. With `own`, its
        processes see an empty folder of their own there (a tmpfs in a mount namespace of
        their own: a disk of that node's), where the others see this machine's."""
        self._added += 1
        number = self._added
        self.nodes[number] = self._ray(
            f"--address={self.address}", f"--node-ip-address={self.node_ip(number)}",
            f"--num-cpus={cpus}", f"--dashboard-agent-listen-port={free_port()}",
            log_name=f"worker-{number}.log", own=own)
        return number

    def node_ip(self, number: int) -> str:
        return f"127.0.0.{2 + number}"

    def kill_node(self, number: int) -> None:
        """Worker node `number` lost without grace, as when its machine dies: its
        `ray start`, raylet, workers and agents all SIGKILLed at once."""
        proc = self.nodes.pop(number)
        for pid in [proc.pid, *processes_under(proc.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(10)

    def stop_node(self, number: int) -> None:
        """Worker node `number` stopped on purpose (SIGTERM: Ray ends it cleanly)."""
        _stop(self.nodes.pop(number), 30.0)

    def stop(self) -> None:
        """Stop the workers, then the head (each `ray start --block` ends its node); then
        what outlived them (the nodes Ray's autoscaler started are its children, and
        outlive it)."""
        started: dict[int, tuple[str, str]] = {}
        for number in sorted(self.nodes, reverse=True):
            proc = self.nodes.pop(number)
            started.update(processes_under(proc.pid))
            _stop(proc, 30.0)
        for pid, (start, _) in started.items():
            stat = proc_stat(pid)
            if stat is not None and stat[19] == start:  # the same process, still there
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class NamespacedCluster(LocalCluster):
    """A `LocalCluster` whose worker nodes are hosts of their own: each in a network
    namespace (`ip netns`) with one interface, a veth pair to a bridge of this machine's,
    so that every call between executors on two nodes crosses a network stack as it
    would between machines. The head is on the bridge's address in this namespace (a
    driver here finds its raylet there). Needs root (CI and the sessions run as root).

    Args:
        run_dir, cpus: as `LocalCluster`'s (head first).
        subnet: the first three octets of the /24 the nodes take (.1 the head, .2, .3,
            ... the workers): addresses that exist only in this machine's namespaces.
        delay_ms: a delay each veth adds per packet (`tc netem`); where the kernel has no
            netem, `delay_error` says so and the cluster runs without one.
    """

    def __init__(self, run_dir: str, cpus: Sequence[int] = (2, 1, 1), subnet: str = "10.231.7",
                 delay_ms: float | None = None) -> None:
        super().__init__(run_dir, cpus)
        self.subnet = subnet
        self.delay_ms = delay_ms
        self.delay_error: str | None = None
        self.head_ip = f"{subnet}.1"
        self.tag = f"cm{os.getpid() % 100_000}"  # names of 15 characters at most, per run
        self.bridge = f"{self.tag}b"
        self.namespaces: dict[int, str] = {}

    def node_ip(self, number: int) -> str:
        return f"{self.subnet}.{1 + number}"

    def start(self) -> NamespacedCluster:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.head_ip}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        self.port = free_port(self.head_ip)
        self.address = f"{self.head_ip}:{self.port}"
        super().start()
        return self

    def add_node(self, cpus: int, own: str | None = None) -> int:
        if own is not None:
            raise ValueError("add_node: a namespaced node has this machine's disk (own=None)")
        self._added += 1
        number = self._added
        ns, veth = f"{self.tag}n{number}", f"{self.tag}v{number}"
        _ip("netns", "add", ns)
        self.namespaces[number] = ns
        _ip("link", "add", veth, "type", "veth", "peer", "name", f"{veth}p")
        _ip("link", "set", f"{veth}p", "netns", ns)
        _ip("link", "set", veth, "master", self.bridge, "up")
        inside = ("ip", "netns", "exec", ns, "ip")
        for step in (("addr", "add", f"{self.node_ip(number)}/24", "dev", f"{veth}p"),
                     ("link", "set", f"{veth}p", "up"), ("link", "set", "lo", "up"),
                     ("route", "add", "default", "via", self.head_ip)):
            subprocess.run([*inside, *step], check=True, capture_output=True)
        if self.delay_ms:
            for dev, where in ((veth, ()), (f"{veth}p", ("ip", "netns", "exec", ns))):
                done = subprocess.run([*where, "tc", "qdisc", "add", "dev", dev, "root", "netem",
                                       "delay", f"{self.delay_ms}ms"], capture_output=True)
                if done.returncode != 0:
                    self.delay_error = done.stderr.decode(errors="replace").strip()
        self.nodes[number] = self._ray(
            f"--address={self.address}", f"--node-ip-address={self.node_ip(number)}",
            f"--num-cpus={cpus}", f"--dashboard-agent-listen-port={free_port()}",
            log_name=f"worker-{number}.log", netns=ns)
        return number

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            for number, ns in list(self.namespaces.items()):
                subprocess.run(["ip", "link", "del", f"{self.tag}v{number}"], capture_output=True)
                subprocess.run(["ip", "netns", "del", ns], capture_output=True)
                del self.namespaces[number]
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


def _ip(*args: str) -> None:
    """An `ip` command; its error, if any, raised with what it said."""
    done = subprocess.run(["ip", *args], capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.decode(errors='replace').strip()}")


def processes_under(pid: int) -> dict[int, tuple[str, str]]:
    """Every process descending from `pid` (an embedded Ray: GCS, raylet, workers, agents):
    pid -> (start time, so that a reused pid is not taken for it; command line)."""
    parents: dict[int, int] = {}
    started: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        stat = proc_stat(int(entry)) if entry.isdigit() else None
        if stat is not None:
            parents[int(entry)], started[int(entry)] = int(stat[1]), stat[19]
    found: dict[int, tuple[str, str]] = {}
    todo = [pid]
    while todo:
        parent = todo.pop()
        for child in (p for p, pp in parents.items() if pp == parent):
            try:
                with open(f"/proc/{child}/cmdline", "rb") as f:
                    command = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                continue
            found[child] = (started[child], command)
            todo.append(child)
    return found


def proc_stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state, ppid, ...), or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def fresh_dir(path: str) -> str:
    """An empty folder at `path` (a previous run's files removed)."""
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path, exist_ok=True)
    return os.path.abspath(path)
