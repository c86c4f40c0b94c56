"""Progress of a long build step, as an operator reads it: counts, rate and time left.

``Progress(report)`` is the callback a build takes (``build_version(..., progress=...)``): the step calls it with
what it counts, how many are done and how many in all (``done == 0`` when it starts). A line goes to ``report``
when the step starts, at most every ``interval_s`` seconds while it runs, and when it ends::

    embedding 5,183 new chunks
    embedded 1,200/5,183 chunks, 85/s, about 47 s left
    embedded 5,183/5,183 chunks in 61.0 s, 85/s

``summary()`` gives each step's last line, for the run's metadata.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


def duration(seconds: float) -> str:
    """``47 s``, ``8 min``, ``1.5 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass
class _Step:
    started: float
    reported: float
    line: str = ""


@dataclass
class Progress:
    """Throttled progress lines for ``report`` (a logger's ``info``); ``clock`` for tests."""

    report: Callable[[str], None]
    interval_s: float = 10.0
    clock: Callable[[], float] = time.monotonic
    steps: dict[str, _Step] = field(default_factory=dict)

    def __call__(self, what: str, done: int, total: int) -> None:
        now = self.clock()
        step = self.steps.get(what)
        if step is None or done == 0:
            self.steps[what] = _Step(now, now, f"{total:,} {what} to embed")
            self.report(f"embedding {total:,} new {what}")
            return
        elapsed = max(now - step.started, 1e-9)
        rate = done / elapsed
        if done >= total:
            step.line = f"embedded {done:,}/{total:,} {what} in {elapsed:.1f} s, {rate:,.0f}/s"
        elif now - step.reported >= self.interval_s:
            left = (total - done) / rate if rate > 0 else float("inf")
            step.line = f"embedded {done:,}/{total:,} {what}, {rate:,.0f}/s, about {duration(left)} left"
        else:
            return
        step.reported = now
        self.report(step.line)

    def summary(self) -> dict[str, str]:
        """The last line of each step, by what it counted."""
        return {what: step.line for what, step in self.steps.items()}
