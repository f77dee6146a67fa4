"""Continuous batching: requests join a running batch between steps and finished rows leave it
at the step they finish, so concurrent requests share forwards instead of queueing behind each other.

    sched = Scheduler(model)                       # one stepping thread per loaded model
    req = sched.submit(rows, params)               # or submit(rows, decoder="ngram", max_new_tokens=64)
    for step in req.steps():                       # this request's own steps, as they happen
        ...
    req.result().new_tokens, req.result().stats    # or: req.cancel()

The serving core has three rooms (suite/serving/): a *request* (`RequestParams`, built once at its
front end, a status and its output), a *planner* that only decides (who starts, which batch each
newcomer joins, fused or prefilled, in chunks under one token budget, who leaves) and an *engine*
that runs the plan on the model's stepping thread (forwards, delivery, failure isolation). This
class is the front door: it checks a request when it is submitted (`suite.prepare`: a bad option or
a prompt over the context fails that call alone) and hands it to the engine.

Which requests share forwards: requests with the same decoder, options, sampling parameters and
stop tokens run in one batch; others in batches of their own, stepped in turn. A greedy request's
tokens never depend on its batch mates. A seeded sampled request draws from its own streams
(suite.random_streams) and shares batches only where its decoder is `batch_independent` (it sizes
drafts and windows from each row's own state: ar, block decoders, s2d2, ngram_prior,
ctc_speculative, chain/tree decoders with `cost=None`); there, its tokens equal its alone tokens in
exact arithmetic, and in floating point as far as a batched forward's rows round like a lone one's
(tests/core/test_scheduler.py checks it on tiny float32 models; on a real model a wider padded batch
can change a logit's last bits, and with it, rarely, a sampled token). Other seeded sampled requests
run alone.
"""
from __future__ import annotations

import atexit
import weakref

from .api import prepare
from .loop import DecodeResult
from .models.adapters import as_adapter
from .params import RequestParams
from .serving.engine import Engine
from .serving.planner import Planner
from .serving.request import Request, RequestCancelled, RequestStatus

__all__ = ["Request", "RequestCancelled", "RequestParams", "RequestStatus", "Scheduler"]


class Scheduler:
    """One model's serving core. max_rows caps the live rows over all batches; max_tokens is the
    token budget of a prefill forward (rows x padded width; longer prompts go in chunks);
    prefix_cache: a suite.prefix_cache.PrefixCache that newcomers start from (None: off)."""

    def __init__(self, model, max_rows: int = 16, name: str = "parasuite-scheduler", max_tokens: int = 512,
                 prefix_cache=None):
        self.adapter = as_adapter(model)
        self.planner = Planner(self.adapter, max_rows, max_tokens, prefix_cache)
        self.engine = Engine(self.adapter, self.planner, name)
        atexit.register(_close_at_exit, weakref.ref(self.engine))

    def submit(self, input_ids, params: RequestParams | None = None, *, attention_mask=None, stream: bool = False,
               bound=None, **kwargs) -> Request:
        """Queue a request (`RequestParams`, or its fields as keywords); it is checked here, so a bad
        one raises in the caller and never reaches the batch. stream=True: `steps()` will be read.
        bound: the request's own adapter over this model, bound to inputs of its rows (an
        encoder-decoder's `adapter.for_images(pixels)`): its cache carries them, so the rows run
        through the scheduler's adapter beside any other request's."""
        return self.enqueue([self.request(input_ids, params, attention_mask=attention_mask, stream=stream,
                                          bound=bound, **kwargs)])[0]

    def request(self, input_ids, params: RequestParams | None = None, *, attention_mask=None,
                stream: bool = False, bound=None, **kwargs) -> Request:
        """A checked request (`submit`'s arguments), not queued yet: `enqueue` queues several at once."""
        if self.engine.closed:
            raise RuntimeError("the scheduler is closed")
        params = RequestParams.of(params, **kwargs)
        model = bound or self.adapter
        _, dec, state = prepare(model, input_ids, attention_mask, params)
        request = Request(state, dec, params, stream=stream)
        prompts = [list(t) for t in state.tokens]

        def replay(given: list[list], finished: list[bool]):
            """The request again from its prompts plus the tokens `given` so far (engine `_isolate`)."""
            left = [params.max_new_tokens - len(g) for g in given]
            _, again, fresh = prepare(model, [p + g for p, g in zip(prompts, given)], None,
                                      params.but(max_new_tokens=max(max(left), 1)))
            fresh.budgets, fresh.done = [max(n, 0) for n in left], list(finished)
            return again, fresh

        if state.inputs.constraints is None:         # a grammar's matcher state is not replayed
            request.replay = replay
        return request

    def enqueue(self, requests: list[Request]) -> list[Request]:
        """Queue requests made by `request` together: one job's parts (a page's lines) are admitted
        together, whatever the time it took to make them."""
        return self.engine.enqueue(requests)

    def generate(self, input_ids, params: RequestParams | None = None, **kwargs) -> DecodeResult:
        """Submit and wait: the request's result (what `suite.decode` returns for it alone)."""
        return self.submit(input_ids, params, **kwargs).result()

    def close(self, timeout: float | None = None) -> None:
        """Stop the thread once the running requests finish (waiting up to `timeout` seconds for
        it); later submits are refused."""
        self.engine.close(timeout)

    @property
    def live_rows(self) -> int:
        return self.engine.live_rows

    @property
    def forwards_run(self) -> int:
        return self.engine.forwards_run

    @property
    def prefix_cache(self):
        return self.planner.prefix_cache

    @prefix_cache.setter
    def prefix_cache(self, cache) -> None:
        self.planner.prefix_cache = cache

    @property
    def idle_exit_s(self) -> float:
        return self.engine.idle_exit_s

    @idle_exit_s.setter
    def idle_exit_s(self, seconds: float) -> None:
        self.engine.idle_exit_s = seconds


def _close_at_exit(engine_ref, timeout: float = 10.0) -> None:
    """At interpreter exit, stop a scheduler's stepping thread before Python finalizes: a daemon thread
    still inside native code then (torch, llama.cpp) was killed mid-call and aborted the process once in
    about ten runs ("terminate called without an active exception")."""
    engine = engine_ref()
    if engine is not None:
        engine.close(timeout)
