"""A timed run: decode time counts only the decoder's own work, not the UI's; side-by-side runs
advance by the time each has used; streaming output throttled."""
from __future__ import annotations

import time


class TimedIterator:
    """Wraps an iterator; `elapsed` sums the time spent inside next(), so interleaving two runs
    or rendering between steps does not count against either."""

    def __init__(self, iterable):
        self._it = iter(iterable)
        self.elapsed = 0.0
        self.done = False

    def step(self):
        t0 = time.perf_counter()
        try:
            return next(self._it)
        except StopIteration:
            self.done = True
            return None
        finally:
            self.elapsed += time.perf_counter() - t0


def race(runs):
    """Advance the unfinished run (anything with .done, .timer and .advance()) that has used the least
    decode time so far, so side-by-side runs fill in as fast as each really goes; yield after each step."""
    while True:
        pending = [r for r in runs if not r.done]
        if not pending:
            return
        min(pending, key=lambda r: r.timer.elapsed).advance()
        yield


def throttled(steps, every_s: float = 0.05):
    """Yield after `steps` at most every `every_s` seconds, and at the end unless nothing stepped since
    the last yield (a repeated final picture can leave the browser showing a broken image)."""
    last, unseen = time.perf_counter(), False
    for _ in steps:
        unseen = True
        if time.perf_counter() - last >= every_s:
            yield
            last, unseen = time.perf_counter(), False
    if unseen:
        yield
