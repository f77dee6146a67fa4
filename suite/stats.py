"""What every decode reports."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field


@dataclass
class DecodeStats:
    num_forwards: int = 0          # target-model passes, prefill included
    num_draft_forwards: int = 0    # passes of a separate draft model (speculative)
    num_new_tokens: int = 0        # committed new tokens, summed over the batch
    accepted_lengths: list[list[int]] = field(default_factory=list)  # per step, tokens committed per row
    wall_time_s: float = 0.0
    draft_time_s: float = 0.0      # of wall_time_s, the time spent drafting (eagle's head, a draft model)
    events: dict[str, int] = field(default_factory=dict)   # counts a decoder reports (e.g. box blocks, fallbacks)
    num_forced_tokens: int = 0     # of num_new_tokens, those a grammar forced (suite.constraint: single allowed
                                   # tokens committed without a forward, forced spans verified in one)
    mask_time_s: float = 0.0       # of wall_time_s, the time spent in grammar constraints (masks, matchers)
    forward_time_s: float = 0.0    # of wall_time_s, the target's forwards (on a GPU: until their launch returns)

    def snapshot(self) -> "DecodeStats":
        """A copy as of now, with lists of its own: what a streamed step carries, so that a reader who keeps
        a step (or reads it late) sees that step's figures, not the running totals."""
        out = copy.copy(self)
        out.accepted_lengths = [list(step) for step in self.accepted_lengths]
        out.events = dict(self.events)
        return out

    def count(self, event: str, n: int = 1) -> None:
        self.events[event] = self.events.get(event, 0) + n

    @property
    def tokens_per_forward(self) -> float:
        return self.num_new_tokens / max(self.num_forwards, 1)

    @property
    def tokens_per_second(self) -> float:
        return self.per_second(self.num_new_tokens)

    def per_second(self, count: float, seconds: float | None = None) -> float:
        """count / seconds (default wall_time_s); 0 when no time was measured."""
        seconds = self.wall_time_s if seconds is None else seconds
        return count / seconds if seconds > 0 else 0.0

    @property
    def mean_accepted(self) -> float:
        """Mean tokens committed per row per step, over rows that committed anything."""
        lengths = [n for step in self.accepted_lengths for n in step if n > 0]
        return sum(lengths) / max(len(lengths), 1)

    @property
    def row_forwards(self) -> int:
        """Forwards summed over the batch's rows, each counting the steps where it committed tokens:
        what the rows would take decoded one by one (a batched forward serves every row at once)."""
        return sum(1 for step in self.accepted_lengths for n in step if n > 0)

    def steps_per_row(self) -> list[int]:
        """Forwards each batch row needed (its last committing step + 1): the forwards it would take
        decoded on its own, since a ragged batch advances every row by its own accepted length."""
        last = [0] * (len(self.accepted_lengths[0]) if self.accepted_lengths else 0)
        for i, step in enumerate(self.accepted_lengths):
            for b, n in enumerate(step):
                if n > 0:
                    last[b] = i + 1
        return last

    @classmethod
    def beside(cls, parts: list["DecodeStats"]) -> "DecodeStats":
        """Batches' stats as one (see `add_beside`), in time linear in their steps and rows."""
        out = cls()
        out._add_counts(parts)
        out.accepted_lengths = _lengths_beside([out.accepted_lengths] + [s.accepted_lengths for s in parts])
        return out

    def add_beside(self, other: "DecodeStats") -> None:
        """Add a later batch's stats to these: counts and times add up; its rows sit beside the
        earlier batches' in accepted_lengths (steps_per_row stays one entry per row)."""
        self._add_counts([other])
        self.accepted_lengths = _lengths_beside([self.accepted_lengths, other.accepted_lengths])

    def then(self, later: "DecodeStats") -> "DecodeStats":
        """These rows' stats followed by a later decode of the same rows (e.g. a video's first frame,
        then the rest): counts and times add up, the later steps follow these."""
        out = type(self)()
        out._add_counts([self, later])
        out.accepted_lengths = self.accepted_lengths + later.accepted_lengths
        return out

    def _add_counts(self, parts: list["DecodeStats"]) -> None:
        for s in parts:
            self.num_forwards += s.num_forwards
            self.num_draft_forwards += s.num_draft_forwards
            self.num_new_tokens += s.num_new_tokens
            self.wall_time_s += s.wall_time_s
            self.draft_time_s += s.draft_time_s
            self.num_forced_tokens += s.num_forced_tokens
            self.mask_time_s += s.mask_time_s
            self.forward_time_s += s.forward_time_s
            for event, n in s.events.items():
                self.count(event, n)

    def summary(self) -> str:
        per = f"{self.tokens_per_forward:.2f} tok/forward" if self.num_forwards else "no forward"
        return (f"{self.num_new_tokens} tokens in {self.num_forwards} forwards ({per}), {self.wall_time_s:.2f} s, "
                f"{self.tokens_per_second:.1f} tok/s")

    def as_dict(self) -> dict:
        """The stats as JSON-ready numbers; tokens_per_forward is None when no forward ran (a CTC
        head's reading, a draft accepted without a pass): there is no per-forward figure then."""
        return {"num_forwards": self.num_forwards, "num_draft_forwards": self.num_draft_forwards,
                "num_new_tokens": self.num_new_tokens,
                "tokens_per_forward": self.tokens_per_forward if self.num_forwards else None,
                "tokens_per_second": self.tokens_per_second, "mean_accepted": self.mean_accepted,
                "wall_time_s": self.wall_time_s, "draft_time_s": self.draft_time_s,
                "num_forced_tokens": self.num_forced_tokens, "mask_time_s": self.mask_time_s,
                "forward_time_s": self.forward_time_s}


def _lengths_beside(parts: list[list[list[int]]]) -> list[list[int]]:
    """Per-step accepted lengths of batches side by side: step i holds each batch's rows at its
    step i (zeros for a batch with fewer steps)."""
    widths = [len(p[0]) if p else 0 for p in parts]
    steps = max((len(p) for p in parts), default=0)
    return [[n for p, w in zip(parts, widths) for n in (p[i] if i < len(p) else [0] * w)] for i in range(steps)]
