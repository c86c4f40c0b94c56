"""Work one request shares between a pool and its own thread (``SharedWork``).

A hybrid query over graphs walks two graphs at once (the request's thread and a walk thread) and scores BM25 in
pieces (``livemem.index.sparse.Pieces``). On two cores, three busy threads wait on each other (a thread woken while
both cores are busy waits for a time slice: walks started up to 5 ms late), so the request hands its other work to
the walk thread's pool *after* the walks, and takes it up itself whenever it would otherwise wait. The pool takes
jobs from the first, the request's thread from the last, so they meet in the middle.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future


class SharedWork:
    """Jobs (callables) that a pool and the request's thread share: ``submit`` hands every job to a pool (jobs
    ``add``-ed later go to it too); ``help`` runs, on the calling thread, the last job no thread has started;
    ``finish`` runs what is left here and waits for the rest (raising what a job raised)."""

    def __init__(self) -> None:
        self._jobs: list[Callable[[], object]] = []
        self._futures: list[Future | None] = []
        self._claimed: list[bool] = []
        self._pool: Executor | None = None
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._jobs)

    def add(self, job: Callable[[], object]) -> None:
        with self._lock:
            self._jobs.append(job)
            self._claimed.append(False)
            self._futures.append(None if self._pool is None else self._pool.submit(job))

    def submit(self, pool: Executor | None) -> None:
        """Hand the jobs to ``pool`` (once; None: none, the calling threads run them)."""
        with self._lock:
            if pool is None or self._pool is not None:
                return
            self._pool = pool
            self._futures = [f if f is not None or c else pool.submit(j)
                             for j, f, c in zip(self._jobs, self._futures, self._claimed, strict=True)]  # fmt: skip

    def help(self) -> bool:
        """Run the last job no thread has started, here; False when none is left."""
        with self._lock:
            for i in range(len(self._jobs) - 1, -1, -1):
                if self._claimed[i]:
                    continue
                future = self._futures[i]
                if future is None or future.cancel():
                    self._claimed[i] = True
                    job = self._jobs[i]
                    break
            else:
                return False
        job()
        return True

    def finish(self) -> None:
        """Every job done: those not started, here; then wait for the pool's."""
        while self.help():
            pass
        for future in list(self._futures):
            if future is not None and not future.cancelled():
                future.result()
