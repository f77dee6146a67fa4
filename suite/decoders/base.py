"""What every decoder declares, with the defaults most take (the `suite.loop.Decoder` protocol's
optional parts): a decoder class inherits `DecoderBase` and overrides what differs."""
from __future__ import annotations

from typing import ClassVar


class DecoderBase:
    requires: ClassVar[frozenset] = frozenset()    # adapter capabilities it needs (suite.models.capabilities)
    batch_independent: ClassVar[bool] = False      # rows never depend on batch mates (seeded requests share)
    always_samples: ClassVar[bool] = False         # draws even when greedy (a canvas sampler)
    whole_prompt: ClassVar[bool] = False           # its first step feeds the whole prompt (no chunked prefill)
    forecasts: ClassVar[bool] = False              # under auto: `forecast`s its step, `follow`s the steps others run
    grids = None                                   # a raster decoder's `grids(state)`: each row's grid (-1: undecided)

    def bind(self, model):
        """This decoder for `model` (a draft sized to its cost curve, a head on its device)."""
        return self

    def observes(self, state) -> bool:
        """Whether the next forward returns the target's hidden states for `observe` (eagle)."""
        return False

    def forecast(self, state) -> tuple[float, float, bool]:
        """With `forecasts`: what this step's draft would promise, for auto (tokens a live row is expected
        to commit, the widest row's tokens, whether it is a tree)."""
        raise NotImplementedError(f"{self.name} does not forecast its steps")

    def follow(self, state, committed: list[list[int]]) -> None:
        """With `forecasts`: another decoder ran this step (auto); learn from the tokens it committed."""
