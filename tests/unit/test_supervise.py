"""`livemem up` (`make run`): the serving app and the Dagster daemon run side by side and stop together
(``orchestration.supervise``), on small Python children standing in for both."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

from orchestration.supervise import Child, Supervisor

# a child that writes its pid, then sleeps until it is terminated (and says so in a file)
SLEEPER = """
import os, signal, sys, time
out = sys.argv[1]
def stop(signum, frame):
    open(out + ".stopped", "w").write(str(signum))
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
open(out + ".pid", "w").write(str(os.getpid()))
while True:
    time.sleep(0.05)
"""
EXITS = "import sys, time; time.sleep(float(sys.argv[1])); sys.exit(int(sys.argv[2]))"


def sleeper(name: str, tmp: Path, essential: bool) -> Child:
    return Child(name, [sys.executable, "-c", SLEEPER, str(tmp / name)], essential=essential)


def wait_for(path: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_stops_both(tmp_path: Path) -> None:
    log: list[str] = []
    sup = Supervisor([sleeper("app", tmp_path, True), sleeper("daemon", tmp_path, False)], log.append, poll_s=0.05)
    result: dict[str, int] = {}
    thread = threading.Thread(target=lambda: result.setdefault("code", sup.run()))
    thread.start()
    wait_for(tmp_path / "app.pid")
    wait_for(tmp_path / "daemon.pid")
    sup.request_stop(signal.SIGTERM)  # what the SIGTERM handler does (it is installed only on the main thread)
    thread.join(60)
    assert not thread.is_alive() and result["code"] == 0
    for name in ("app", "daemon"):
        assert (tmp_path / f"{name}.stopped").read_text() == str(int(signal.SIGTERM))
        assert not alive(int((tmp_path / f"{name}.pid").read_text()))
    assert any("SIGTERM received" in line for line in log), log


def test_a_real_sigterm_to_the_supervisor_stops_both(tmp_path: Path) -> None:
    """The handlers on the main thread: SIGTERM to this process ends ``run`` and every child."""
    log: list[str] = []
    sup = Supervisor([sleeper("app", tmp_path, True), sleeper("daemon", tmp_path, False)], log.append, poll_s=0.05)

    def send_when_started() -> None:
        wait_for(tmp_path / "app.pid")
        wait_for(tmp_path / "daemon.pid")
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=send_when_started, daemon=True).start()
    before = signal.getsignal(signal.SIGTERM)
    assert sup.run() == 0
    assert signal.getsignal(signal.SIGTERM) is before  # handlers given back
    for name in ("app", "daemon"):
        assert (tmp_path / f"{name}.stopped").exists()
        assert not alive(int((tmp_path / f"{name}.pid").read_text()))


def test_the_daemon_dying_leaves_the_app_serving_and_is_logged(tmp_path: Path) -> None:
    log: list[str] = []
    daemon = Child("daemon", [sys.executable, "-c", EXITS, "0.2", "3"], essential=False)
    sup = Supervisor([sleeper("app", tmp_path, True), daemon], log.append, poll_s=0.05)
    thread = threading.Thread(target=sup.run)
    thread.start()
    wait_for(tmp_path / "app.pid")
    deadline = time.monotonic() + 30
    while not any("daemon exited with code 3" in line for line in log):
        assert time.monotonic() < deadline, log
        time.sleep(0.05)
    assert thread.is_alive() and sup.procs["app"].poll() is None  # still serving
    sup.request_stop(signal.SIGINT)
    thread.join(60)
    assert not thread.is_alive() and (tmp_path / "app.stopped").exists()


def test_the_app_exiting_stops_the_daemon_with_its_code(tmp_path: Path) -> None:
    log: list[str] = []
    app = Child("app", [sys.executable, "-c", EXITS, "0.5", "4"], essential=True)
    sup = Supervisor([app, sleeper("daemon", tmp_path, False)], log.append, poll_s=0.05)
    assert sup.run() == 4
    assert (tmp_path / "daemon.stopped").exists()
    assert not alive(int((tmp_path / "daemon.pid").read_text()))
    assert any("app exited with code 4: stopping the others" in line for line in log), log


def test_a_child_ignoring_sigterm_is_killed(tmp_path: Path) -> None:
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
    log: list[str] = []
    app = Child("app", [sys.executable, "-c", EXITS, "0.5", "0"], essential=True)
    sup = Supervisor([app, Child("daemon", [sys.executable, "-c", stubborn], essential=False)], log.append,
                     poll_s=0.05, stop_timeout_s=1.0)  # fmt: skip
    assert sup.run() == 0
    assert sup.procs["daemon"].returncode == -signal.SIGKILL
    assert any("did not stop within 1 s: killed" in line for line in log), log
