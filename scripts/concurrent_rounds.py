"""The timing both batching scripts share: the same calls one at a time, then all at once in
threads (what concurrent users or a batch CLI's workers send), round after round."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor


def rounds(call, inputs: list, concurrency: int, count: int, same, label: str) -> None:
    """Print, per round, the serial and concurrent wall times, their ratio and whether every
    output is the same both ways (`same(a, b)`)."""
    for r in range(count):
        t0 = time.perf_counter()
        serial = [call(x) for x in inputs]
        one = time.perf_counter() - t0
        t0 = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as ex:
            together = list(ex.map(call, inputs))
        many = time.perf_counter() - t0
        identical = all(same(a, b) for a, b in zip(serial, together))
        print(f"round {r + 1}: {label}: one at a time {one:.2f} s, {concurrency} at once {many:.2f} s: "
              f"{one / many:.2f}x the throughput ({many / one:.2f}x the time); outputs identical: {identical}",
              flush=True)
