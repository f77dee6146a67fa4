"""Per-row random streams: a counter-based generator, so a row's draws never depend on its batch mates.

Each row has a 64-bit key, from its request's seed and the row's index in that request (an unseeded
request draws a random base once). A uniform is a pure function of (row key, logical position,
purpose, draw): splitmix64's finaliser (Steele et al. 2014) applied three times, in int64 tensor ops
on the keys' device, no state, no host sync. So a row's draw at a position is the same whatever
rows share its forward, however the batch is padded and in whatever step it is made; decoders key
each draw by the position it decides and by its purpose below (`draw` tells apart several draws of
one purpose at one position: a codebook, a candidate, a redraw).
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass

import torch

# purposes: what a uniform decides (independent streams per row and position)
SAMPLE = 0    # the token committed at a position from the target: ar's sample, a bonus or residual token
ACCEPT = 1    # the accept test of a draft token (multi-draft: draw = the candidate's rank)
DRAFT = 2     # a draft token sampled from q (a draft model's, SJD's next guess)
COUPLE = 3    # MC-SJD's keep-or-redraw test of an old guess (draw: the row's committed length then, new each step)
REDRAW = 6    # MC-SJD's redraw from the residual when the old guess is not kept (same draw)
ORDER = 4     # a generation order (LPD's random ties and picks)
INIT = 5      # initial guesses (Jacobi's random prompt tokens)

_MASK = (1 << 64) - 1


def _signed(x: int) -> int:
    """An unsigned 64-bit int as torch's int64 holds it."""
    x &= _MASK
    return x - (1 << 64) if x >> 63 else x


_GOLDEN, _M1, _M2 = _signed(0x9E3779B97F4A7C15), _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)


def mix_int(x: int) -> int:
    """splitmix64 of a host int (key derivation), as the signed int64 `mix` would give."""
    z = (x + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return _signed(z ^ (z >> 31))


def _shr(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's `>>` is arithmetic: mask the sign's copies away)."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def mix(x: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser over an int64 tensor (products wrap mod 2**64)."""
    z = x + _GOLDEN
    z = (z ^ _shr(z, 30)) * _M1
    z = (z ^ _shr(z, 27)) * _M2
    return z ^ _shr(z, 31)


def uniforms(keys: torch.Tensor, positions: torch.Tensor, purpose: int, draw: int | torch.Tensor = 0) -> torch.Tensor:
    """float32 uniforms in [0, 1) (24 bits) of (key, position, purpose, draw), broadcast together."""
    salt = mix_int((purpose << 32) + draw) if isinstance(draw, int) else mix((draw + (purpose << 32)).long())
    h = mix(keys + mix(positions.long() + salt))
    return _shr(h, 40).float() * 2.0 ** -24


def row_keys(seed: int | None, batch: int) -> list[int]:
    """The keys of a request's rows: row r of seed s is key(s, r) in any batch; seed None: a random base."""
    base = mix_int(secrets.randbits(64) if seed is None else seed)
    return [mix_int(base + r) for r in range(batch)]


@dataclass
class RowStreams:
    """One key per row, (B,) int64 on the request's device; rows leave and join with the state's."""

    keys: torch.Tensor

    @staticmethod
    def seeded(seed: int | None, batch: int, device) -> "RowStreams":
        return RowStreams(torch.tensor(row_keys(seed, batch), dtype=torch.long, device=device))

    def uniform(self, positions, purpose: int, draw: int | torch.Tensor = 0, rows=None) -> torch.Tensor:
        """Uniforms shaped like `positions` (R, ...): entry [i, ...] is row rows[i]'s (every row when
        rows is None) at that logical position, for `purpose` (and `draw`)."""
        keys = self.keys if rows is None else self.keys[torch.as_tensor(rows, dtype=torch.long, device=self.keys.device)]
        positions = torch.as_tensor(positions, dtype=torch.long, device=self.keys.device)
        return uniforms(keys.reshape(-1, *[1] * (positions.dim() - 1)), positions, purpose, draw)

    def chain(self, starts: torch.Tensor, width: int, rows=None) -> tuple[torch.Tensor, torch.Tensor]:
        """A speculative verification's uniforms: (R, width) accept tests of the drafts at positions
        starts[i] + j, and (R,) the draw of the token after the accepted prefix, keyed by the first
        position the step decides (starts[i]: decided in this step, so never drawn again)."""
        offsets = torch.arange(width, dtype=torch.long, device=self.keys.device)
        return (self.uniform(starts[:, None] + offsets, ACCEPT, rows=rows),
                self.uniform(starts, SAMPLE, rows=rows))

    def row_chain(self, b: int, start: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """`chain` for row b alone: (width,) accept tests from position `start` on, () the next token's."""
        u, u_next = self.chain(torch.tensor([start], dtype=torch.long, device=self.keys.device), width, rows=[b])
        return u[0], u_next[0]

    def row(self, b: int, position: int, purpose: int, count: int, first: int = 0) -> torch.Tensor:
        """(count,) uniforms of row b at one position: draws first..first+count-1 of `purpose`."""
        draws = torch.arange(first, first + count, device=self.keys.device)
        return uniforms(self.keys[b], torch.full((count,), position, dtype=torch.long, device=self.keys.device),
                        purpose, draws)

    def select(self, index: list[int]) -> None:
        self.keys = self.keys[torch.tensor(index, dtype=torch.long, device=self.keys.device)]

    def extend(self, other: "RowStreams") -> None:
        self.keys = torch.cat([self.keys, other.keys.to(self.keys.device)])
