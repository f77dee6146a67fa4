"""A request of the serving core: its parameters (`suite.params.RequestParams`, built once at its
front end), its status, and its output: the steps it streams and its result."""
from __future__ import annotations

import enum
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from ..loop import DecodeResult, DecodeState, Step
from ..params import RequestParams
from ..stats import DecodeStats

_FINISHED = object()     # end of a request's step stream


class RequestStatus(enum.Enum):
    WAITING = "waiting"          # queued, not started
    RUNNING = "running"          # started: its rows are being prefilled or decoded
    FINISHED = "finished"        # every row done
    FAILED = "failed"            # ended with an error
    CANCELLED = "cancelled"      # its caller left before it finished


class RequestCancelled(RuntimeError):
    """The request was cancelled before it finished."""


@dataclass(eq=False)
class Request:
    """A submitted request's handle: stream its steps, wait for its result, or cancel it."""

    state: DecodeState
    decoder: object
    params: RequestParams = field(default_factory=RequestParams)
    key: object = None          # requests with equal keys share a batch (set once the request started)
    stream: bool = False
    status: RequestStatus = RequestStatus.WAITING
    stats: DecodeStats = field(default_factory=DecodeStats)
    new_tokens: list[list[int]] = field(default_factory=list)
    error: BaseException | None = None
    cancelled: bool = False
    finished_at: float | None = None      # perf_counter() when it finished
    forward_ids: list[int] = field(default_factory=list)    # the engine's forwards its rows were in
    isolated: bool = False                # running alone again after a forward it shared failed
    replay: Callable | None = None        # its (decoder, state) anew from its prompts plus the tokens given so far

    def __post_init__(self):
        self.batch = self.state.batch
        self.new_tokens = [[] for _ in range(self.batch)]
        self._done = threading.Event()
        self._steps: queue.Queue = queue.Queue()
        self.row_done = [False] * self.batch

    def steps(self):
        """Yield this request's Steps (its own rows, in its own order) until it finishes; raises
        its error, or RequestCancelled."""
        while True:
            item = self._steps.get()
            if item is _FINISHED:
                break
            yield item
        self._raise()

    def result(self, timeout: float | None = None) -> DecodeResult:
        if not self._done.wait(timeout):
            raise TimeoutError("the request has not finished")
        self._raise()
        return DecodeResult([list(t) for t in self.new_tokens], self.stats)

    def cancel(self) -> None:
        """Stop the request: its rows leave the batch at the next step (a user who left the page)."""
        self.cancelled = True

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def _raise(self) -> None:
        if self.error is not None:
            raise self.error
        if self.cancelled and not all(self.row_done):
            raise RequestCancelled("the request was cancelled")

    def put(self, step: Step) -> None:
        """Deliver one of its steps to a reader of `steps()`."""
        self._steps.put(step)

    def finish(self, error: BaseException | None = None) -> None:
        """End the request (with `error`, or as cancelled or finished); its reader and waiter wake."""
        if self.done:
            return
        self.error = error
        self.status = (RequestStatus.FAILED if error is not None else
                       RequestStatus.CANCELLED if self.cancelled and not all(self.row_done) else RequestStatus.FINISHED)
        self.finished_at = time.perf_counter()
        self.state = None           # its rows and cache are the batch's, not this handle's, to keep
        self._steps.put(_FINISHED)
        self._done.set()
