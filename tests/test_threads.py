"""bertlook.threads: items on a few threads, results in the items' order, the first error re-raised."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from bertlook.threads import Work, run_items


def _slow_square(i: int) -> int:
    time.sleep(0.001 * (i % 3))  # later items can finish first
    return i * i


@pytest.mark.parametrize("threads", [1, 2, 4, 50])
def test_results_in_the_items_order_whatever_the_threads(threads):
    assert run_items(_slow_square, range(20), threads) == [i * i for i in range(20)]
    assert run_items(_slow_square, range(20), threads, first_alone=True) == [i * i for i in range(20)]
    assert run_items(_slow_square, [], threads) == []
    assert run_items(_slow_square, [3], threads, first_alone=True) == [9]


def test_threads_are_used_and_at_most_one_an_item():
    seen: set[str] = set()
    barrier = threading.Barrier(3, timeout=5)

    def fn(i):
        seen.add(threading.current_thread().name)
        barrier.wait()  # three calls at once: three threads
        return i

    assert run_items(fn, range(3), 8) == [0, 1, 2]
    assert len(seen) == 3 and threading.current_thread().name in seen


def test_first_alone_runs_the_first_item_before_any_helper():
    order: list[tuple[int, str]] = []
    lock = threading.Lock()

    def fn(i):
        with lock:
            order.append((i, threading.current_thread().name))
        time.sleep(0.002)

    run_items(fn, range(6), 3, first_alone=True)
    assert order[0] == (0, threading.current_thread().name)
    assert sorted(i for i, _ in order) == list(range(6))


@pytest.mark.parametrize("threads", [1, 3])
def test_the_first_error_is_raised_and_no_item_is_taken_after_it(threads):
    done: list[int] = []

    def fn(i):
        if i == 2:
            raise ValueError("item 2")
        time.sleep(0.002)
        done.append(i)

    with pytest.raises(ValueError, match="item 2"):
        run_items(fn, range(40), threads)
    assert len(done) < 39  # the threads stopped taking items


def test_a_pool_runs_the_helpers_and_a_started_work_is_finished_later():
    with ThreadPoolExecutor(2) as pool:
        assert run_items(_slow_square, range(10), 3, pool=pool) == [i * i for i in range(10)]
        work = Work(_slow_square, range(10)).start(2, pool)  # the helpers take items meanwhile
        assert work.finish() == [i * i for i in range(10)]
        failing = Work(lambda i: 1 / (i - 4), range(10)).start(2, pool)
        with pytest.raises(ZeroDivisionError):
            failing.finish()
