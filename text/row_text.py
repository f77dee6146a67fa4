"""A row's text as its tokens arrive, for every front end alike (`TextGenerator.generate` and `stream`,
`python -m text`, the OpenAI server): the new tokens decoded in full, cut at the first stop string, and
the tail that may begin a stop string, or ends inside a multi-byte character, held back until it is
known. One place decides what a user reads and why a row ended."""
from __future__ import annotations

MAX_STOPS = 4           # stop strings a request may give (as the OpenAI API allows)


def check_stops(stop: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """Stop strings as a list: one string or up to MAX_STOPS of them, none empty; ValueError naming
    the fix otherwise."""
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, (list, tuple)) or not all(isinstance(s, str) and s for s in stops) \
            or len(stops) > MAX_STOPS:
        raise ValueError(f"stop must be a non-empty string or a list of up to {MAX_STOPS} of them")
    return list(stops)


class RowText:
    """One row: `add(tokens, done)` returns the text to show now; `finish` is None while the row runs,
    then "stop" (a stop string: the text ends before it), "eos" (the model's end token) or "length"
    (the token budget or the context ran out). `ids` are the tokens as generated, `text` what was shown."""

    def __init__(self, decode, eos_token_ids, stops: list[str] | tuple[str, ...] = ()):
        self.decode, self.eos_token_ids, self.stops = decode, eos_token_ids, list(stops)
        self.ids: list[int] = []
        self.text = ""
        self.finish: str | None = None

    def add(self, tokens: list[int], done: bool) -> str:
        if self.finish is not None:
            return ""
        self.ids.extend(tokens)
        full = self.decode(self.ids)
        cut = min((i for i in (full.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            full, self.finish = full[:cut], "stop"
        elif done:
            self.finish = "eos" if self.ids and self.ids[-1] in self.eos_token_ids else "length"
        elif full.endswith("\ufffd"):
            return ""               # the last token ends inside a multi-byte character: wait for the rest
        else:
            full = full[:len(full) - self._held(full)]
        if not full.startswith(self.text):
            return ""               # decoding rewrote earlier text (rare): keep what was shown
        chunk, self.text = full[len(self.text):], full
        return chunk

    def end(self) -> str:
        """The row ended without saying so (its request finished or was cut short): what was held
        back, and finish "eos" or "length"."""
        return self.add([], done=True) if self.finish is None else ""

    def _held(self, text: str) -> int:
        """Length of the longest tail of `text` that begins some stop string."""
        return max((k for s in self.stops for k in range(min(len(s) - 1, len(text)), 0, -1)
                    if s.startswith(text[-k:])), default=0)
