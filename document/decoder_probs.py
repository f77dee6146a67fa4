"""Each read token's probability from the decoder's own forwards: no extra scoring pass.

`Recording(decoder)` runs any decoder unchanged and keeps, per row, the log-probability the
causal model gave each committed token in the forward that committed it. That holds for chain
decoders (ar, ctc_speculative, ngram_prior, ...): a step commits the verified guesses plus the
model's next token, and slot i of the row's chain scored committed token i. A step of any other
shape (block diffusion's noisy slots, tokens committed before any forward) leaves the row
unscored, and the caller scores it with a teacher-forced pass (document.ocr.confidence), which
gives the same numbers up to rounding.

The wrapped decoder's row state travels inside ours (`TokenLog.inner`), so rows leave and join
running batches (suite.scheduler) with their logs; the logs of a request are found by the
`RequestInputs` object it was given (`Recording.logs_of`), which its state holds when it starts.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from suite.decoders.base import DecoderBase
from suite.decoders.chain.base import ChainMeta


@dataclass(eq=False)
class TokenLog:
    inner: object                                   # the wrapped decoder's own row state
    logprobs: list[float] | None = field(default_factory=list)   # None: a token came without its probability


class Recording(DecoderBase):
    """`inner`, with each committed token's causal log-probability logged per row."""

    def __init__(self, inner):
        self.inner = inner
        self._logs: dict[int, list[TokenLog]] = {}     # id(request inputs) -> its rows' logs

    # the wrapped decoder's declarations: the scheduler keys, validates and batches by them
    name = property(lambda self: self.inner.name)
    requires = property(lambda self: self.inner.requires)
    batch_independent = property(lambda self: self.inner.batch_independent)
    always_samples = property(lambda self: self.inner.always_samples)
    whole_prompt = property(lambda self: self.inner.whole_prompt)
    grids = property(lambda self: None)

    def __eq__(self, other) -> bool:
        return type(other) is Recording and other.inner == self.inner

    def __hash__(self) -> int:
        return hash((Recording, self.inner))

    def bind(self, model):
        bound = self.inner.bind(model)
        if bound is self.inner:
            return self
        out = Recording(bound)
        out._logs = self._logs
        return out

    def observes(self, state) -> bool:
        return self._inside(state, lambda: self.inner.observes(state))

    def logs_of(self, inputs) -> list[TokenLog] | None:
        """The logs of the rows of the request given `inputs` (its own RequestInputs object; the
        caller keeps it alive), forgotten here once read."""
        return self._logs.pop(id(inputs), None)

    def start(self, state):
        known = self.inner.start(state)
        state.rows = [TokenLog(r) for r in (state.rows or [None] * state.batch)]
        if known is not None:
            for log, tokens in zip(state.rows, known.committed):
                if tokens:
                    log.logprobs = None
        self._logs[id(state.inputs)] = list(state.rows)
        return known

    def propose(self, state):
        return self._inside(state, lambda: self.inner.propose(state))

    def accept(self, state, draft, logits):
        acc = self._inside(state, lambda: self.inner.accept(state, draft, logits))
        self._record(state.rows, draft, logits, acc.committed)
        return acc

    def _inside(self, state, call):
        """call() with state.rows the wrapped decoder's own rows (put back in our logs after)."""
        logs = state.rows
        state.rows = [log.inner for log in logs]
        try:
            return call()
        finally:
            for log, row in zip(logs, state.rows):
                log.inner = row
            state.rows = logs

    @staticmethod
    def _record(logs: list[TokenLog], draft, logits: torch.Tensor, committed: list[list[int]]) -> None:
        """Append each row's committed tokens' log-probabilities (one gather, one host read)."""
        meta = draft.meta
        rows, slots, tokens, owners = [], [], [], []
        for b, new in enumerate(committed):
            if not new or logs[b].logprobs is None:
                continue
            guesses = meta.guesses[b] if isinstance(meta, ChainMeta) else None
            if guesses is None or new[:-1] != guesses[:len(new) - 1]:
                logs[b].logprobs = None             # not a verified chain: the caller scores this row
                continue
            first = meta.num_pending[b] - 1 - draft.logits_from    # the slot that scored the first new token
            rows += [b] * len(new)
            slots += range(first, first + len(new))
            tokens += new
            owners.append((b, len(new)))
        if not rows:
            return
        dev = logits.device
        picked = logits[torch.tensor(rows, device=dev), torch.tensor(slots, device=dev)].float().log_softmax(-1)
        values = picked.gather(1, torch.tensor(tokens, device=dev)[:, None])[:, 0].tolist()
        at = 0
        for b, n in owners:
            logs[b].logprobs.extend(values[at:at + n])
            at += n
