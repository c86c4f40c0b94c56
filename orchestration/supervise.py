"""Running processes side by side and stopping them together: ``livemem up`` (``make run``) runs the serving app
and the Dagster daemon this way.

Each ``Child`` is a command line. An *essential* child (the serving app) ends the group when it exits: the others
are stopped and its exit code is the group's. A child that is not essential (the daemon) may die alone: that is
logged, with its exit code, and the others keep running (serving does not stop because the schedules stopped;
``livemem status`` then says the daemon is not alive). SIGINT (Ctrl-C) or SIGTERM to this process stops every child:
SIGTERM first, SIGKILL for one still running ``stop_timeout_s`` later. On Linux each child also gets SIGTERM if
this process is killed outright (``PR_SET_PDEATHSIG``), so no child outlives it.

Plain ``subprocess`` and ``signal``, no Dagster: ``tests/unit/test_supervise.py`` runs it on small Python children.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

Log = Callable[[str], None]


@dataclass(frozen=True)
class Child:
    """One process of the group: its name (in the log), command line, environment (None: this one's)."""

    name: str
    argv: Sequence[str]
    essential: bool = True
    env: Mapping[str, str] | None = None


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


@dataclass
class Supervisor:
    """Starts ``children``, watches them every ``poll_s`` seconds, stops them all together (see the module)."""

    children: Sequence[Child]
    log: Log
    poll_s: float = 0.5
    stop_timeout_s: float = 20.0
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    stop_requested: threading.Event = field(default_factory=threading.Event)
    stop_signal: int | None = None

    def start(self) -> None:
        preexec = _die_with_parent if sys.platform.startswith("linux") else None
        for child in self.children:
            proc = subprocess.Popen(list(child.argv), env=None if child.env is None else dict(child.env),
                                    preexec_fn=preexec)  # fmt: skip
            self.procs[child.name] = proc
            self.log(f"started {child.name} (pid {proc.pid}): {' '.join(child.argv)}")

    def request_stop(self, signum: int | None = None, _frame: object = None) -> None:
        """What SIGINT and SIGTERM do: every child is stopped and ``run`` returns."""
        self.stop_signal = signum
        self.stop_requested.set()

    def run(self) -> int:
        """Start the children and supervise them until an essential one exits or a stop is requested; then stop
        every child. Returns the exit code: the essential child's, or 0 after a stop by signal."""
        handlers = {}
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                handlers[signum] = signal.signal(signum, self.request_stop)
        try:
            self.start()
            return self.watch()
        finally:
            self.stop_all()
            for signum, handler in handlers.items():
                signal.signal(signum, handler)

    def watch(self) -> int:
        lost: set[str] = set()
        while not self.stop_requested.wait(self.poll_s):
            for child in self.children:
                code = self.procs[child.name].poll()
                if code is None or child.name in lost:
                    continue
                if child.essential:
                    self.log(f"{child.name} exited with code {code}: stopping the others")
                    return code
                lost.add(child.name)
                self.log(f"{child.name} exited with code {code}; the others keep running without it")
        name = signal.Signals(self.stop_signal).name if self.stop_signal else "a stop"
        self.log(f"{name} received: stopping {', '.join(self.procs)}")
        return 0

    def stop_all(self) -> None:
        """SIGTERM to every child still running, SIGKILL to any still running ``stop_timeout_s`` later."""
        running = [(n, p) for n, p in self.procs.items() if p.poll() is None]
        for _, proc in running:
            proc.terminate()
        deadline = time.monotonic() + self.stop_timeout_s
        for name, proc in running:
            try:
                proc.wait(max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                self.log(f"{name} (pid {proc.pid}) did not stop within {self.stop_timeout_s:.0f} s: killed")
                proc.kill()
                proc.wait()
            else:
                self.log(f"{name} stopped (code {proc.returncode})")
