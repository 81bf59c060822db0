"""Items run on a few threads of this process: the calling thread and helpers take them one at a time, in order.

:func:`run_items` is what the numba kernels (ALTI's distances, the mixture entropies, the per-layer surface
statistics) and the layer readers of the forward pass use: ``fn(item)`` for every item, the results in the items'
order, the first error re-raised in the calling thread once no call is running (the other threads take no new
item after an error). The kernels release the GIL, so the threads run at once; the numbers do not depend on how
many there are (each item writes its own part of the output). :class:`Work` is the same with the helpers started
and the waiting done apart (:mod:`bertlook.attention.stream`: a batch's consumer calls made by helpers while the
calling thread computes the next batch).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable


class Work:
    """``fn(item)`` for each of ``items``, taken one at a time and in order by whichever thread calls
    :meth:`work` (the helpers of :meth:`start`, the calling thread in :meth:`finish`); ``results`` in the items'
    order."""

    def __init__(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> None:
        self.fn = fn
        self.items = list(items)
        self.results: list[Any] = [None] * len(self.items)
        self.next = 0  # the index of the next item to take
        self.running = 0  # calls being made
        self.errors: list[BaseException] = []
        self.cond = threading.Condition()
        self.threads: list[threading.Thread] = []

    def work(self) -> None:
        """Make calls until none is left to take (or one has failed)."""
        while True:
            with self.cond:
                if self.next >= len(self.items) or self.errors:
                    return
                i = self.next
                self.next += 1
                self.running += 1
            try:
                self.results[i] = self.fn(self.items[i])
            except BaseException as err:  # re-raised by finish() in the calling thread
                with self.cond:
                    self.errors.append(err)
            finally:
                with self.cond:
                    self.running -= 1
                    self.cond.notify_all()

    def start(self, helpers: int, pool=None) -> "Work":
        """``helpers`` threads that take items from now on: new daemon threads, or tasks of ``pool`` (a
        ``concurrent.futures`` executor kept between calls)."""
        for _ in range(max(0, int(helpers))):
            if pool is not None:
                pool.submit(self.work)
            else:
                th = threading.Thread(target=self.work, daemon=True)
                th.start()
                self.threads.append(th)
        return self

    def finish(self) -> list[Any]:
        """Make the calls left, wait for those the helpers are making, re-raise the first error; the results."""
        try:
            self.work()
            with self.cond:
                while self.running:
                    self.cond.wait()
        finally:
            self.cancel()
            for th in self.threads:
                th.join()
        if self.errors:
            raise self.errors[0]
        return self.results

    def cancel(self) -> None:
        """Leave the items not yet taken (after an error elsewhere)."""
        with self.cond:
            self.next = len(self.items)


def run_items(fn: Callable[[Any], Any], items: Iterable[Any], threads: int, *, first_alone: bool = False,
              pool=None) -> list[Any]:
    """``[fn(item) for item in items]`` on ``threads`` threads (at most one an item): the calling thread and
    helpers (new threads, or tasks of ``pool``); the first error is re-raised once no call is running.
    ``first_alone``: the first item in the calling thread before any helper starts (a numba kernel compiled, or
    loaded from its cache, once)."""
    items = list(items)
    if int(threads) <= 1 or len(items) <= 1:  # no helper: the calls one after the other, here
        return [fn(item) for item in items]
    first = [fn(items[0])] if first_alone else []
    work = Work(fn, items[len(first):])
    return first + work.start(min(int(threads), len(work.items)) - 1, pool).finish()
