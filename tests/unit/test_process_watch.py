"""The watch over executors' processes on the controller's host: a real child process,
its exit told at once (by the kernel, no polling of calls); a process it cannot be sure
of is not watched."""

from __future__ import annotations

import subprocess
import sys

from cameo_actors.runtime._private.process_watch import ProcessWatch, identity


def child() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE)


def test_a_watched_process_that_exits_is_told_once_with_its_executor_and_incarnation() -> None:
    told: list[tuple[int, str, int]] = []
    watch = ProcessWatch(lambda *exited: told.append(exited))
    proc = child()
    try:
        assert watch.watch(3, "inc-a", identity(proc.pid))
        assert watch.watch(3, "inc-a", identity(proc.pid))  # once per incarnation
        assert watch.watching() == [(3, "inc-a", proc.pid)] and watch.check(0) == []
        proc.kill()
        assert watch.check(30_000) == [(3, "inc-a", proc.pid)]
        assert told == [(3, "inc-a", proc.pid)] and watch.watching() == []
        assert watch.check(0) == [] and len(told) == 1
    finally:
        proc.kill()
        proc.wait()


def test_a_process_it_cannot_be_sure_of_is_not_watched() -> None:
    watch = ProcessWatch(lambda *exited: None)
    proc = child()
    try:
        host, ns, pid, started = identity(proc.pid).split("/")
        elsewhere = [
            "",  # an executor of an older release, or not on Linux
            f"another-host/{ns}/{pid}/{started}",
            f"{host}/pid:[1]/{pid}/{started}",  # another container of this machine
            f"{host}/{ns}/{pid}/{int(started) + 1}",  # the pid is another process's now
        ]
        for i, process in enumerate(elsewhere):
            assert not watch.watch(i, "inc", process), process
        assert watch.watching() == []
    finally:
        proc.kill()
        proc.wait()


def test_an_identity_names_this_host_namespace_pid_and_start() -> None:
    host, ns, pid, started = identity().split("/")
    assert len(host) == 36 and ns.startswith("pid:[") and started.isdigit()
    assert identity(int(pid)) == identity()
