"""``SharedWork``: the jobs of one request, shared by a pool (from the first) and the request's thread (from the
last, whenever it would wait): each job runs exactly once, jobs added after ``submit`` join the pool, and a job's
error reaches ``finish``."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from livemem.index.work import SharedWork


def test_every_job_runs_once_whoever_takes_it() -> None:
    ran: list[tuple[int, int, str]] = []
    lock = threading.Lock()

    def job(round_: int, i: int) -> None:
        time.sleep(0.0005)
        with lock:
            ran.append((round_, i, threading.current_thread().name))

    with ThreadPoolExecutor(2) as pool:
        for round_ in range(20):
            work = SharedWork()
            for i in range(12):
                work.add(lambda r=round_, i=i: job(r, i))
            work.submit(pool)
            work.add(lambda r=round_: job(r, 12))  # added after submit: goes to the pool too
            while work.help():
                pass
            work.finish()
            assert sorted(i for r, i, _ in ran if r == round_) == list(range(13))
    # the pool took jobs, and so did this thread
    assert {name for *_, name in ran} - {threading.current_thread().name}
    assert threading.current_thread().name in {name for *_, name in ran}


def test_without_a_pool_the_calling_thread_runs_them_all() -> None:
    work = SharedWork()
    ran: list[int] = []
    for i in range(3):
        work.add(lambda i=i: ran.append(i))
    work.submit(None)
    work.finish()
    assert ran == [2, 1, 0]  # from the last


def test_a_jobs_error_reaches_finish() -> None:
    def fail() -> None:
        raise ValueError("piece 3 failed")

    with ThreadPoolExecutor(1) as pool:
        work = SharedWork()
        work.add(lambda: time.sleep(0.01))
        work.add(fail)
        work.submit(pool)
        with pytest.raises(ValueError, match="piece 3 failed"):
            work.finish()
