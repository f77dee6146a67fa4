"""The generation-config settings a VLM folder carries that depend only on the position (forced
BOS/EOS, suppressed tokens, begin-suppressed tokens, one-token bad words, a minimum length), as a
mask of the logits of every slot by the position it predicts, so every decoder sees them. Settings
that depend on the history or on beams are refused, naming them and the override that lifts them."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..hf_fields import GenerationFields, read_fields

# generation settings no position-wise mask can express: setting -> its neutral value
UNSUPPORTED = {"num_beams": 1, "num_beam_groups": 1, "repetition_penalty": 1.0, "encoder_repetition_penalty": 1.0,
               "no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0, "penalty_alpha": None,
               "sequence_bias": None, "exponential_decay_length_penalty": None, "force_words_ids": None,
               "constraints": None, "diversity_penalty": 0.0, "guidance_scale": None, "watermarking_config": None}


@dataclass(frozen=True)
class GenerationRules:
    """The position-wise logits processors of a generation config. `cur_len` is the length of the
    sequence a token is appended to (transformers' own count: prompt placeholders included)."""

    eos: frozenset = frozenset()
    forced_bos: int | None = None
    forced_eos: int | None = None
    suppress: tuple = ()
    begin_suppress: tuple = ()
    bad_words: tuple = ()
    min_length: int = 0
    min_new_tokens: int = 0

    @staticmethod
    def of(gen, eos: frozenset) -> "GenerationRules":
        read = GenerationFields.read(gen)
        bad = tuple(read.bad_words_ids or ())
        asked = read_fields(gen, UNSUPPORTED)
        refused = [f"{k}={v!r}" for k, v in asked.items()
                   if v not in (None, UNSUPPORTED[k]) and not (k == "guidance_scale" and v == 1)]
        refused += [f"bad_words_ids={w!r}" for w in bad if len(w) != 1]
        if refused:
            raise ValueError(f"the folder's generation config asks for {', '.join(refused)}, which suite's decoders "
                             "cannot reproduce (they depend on the history or on beams); override them, e.g. "
                             "load(folder, generation={" + ", ".join(
                                 f"{r.split('=')[0]!r}: {UNSUPPORTED.get(r.split('=')[0])!r}" for r in refused) + "})")
        return GenerationRules(eos, read.forced_bos_token_id, read.forced_eos_token_id, tuple(read.suppress_tokens or ()),
                               tuple(read.begin_suppress_tokens or ()), tuple(w[0] for w in bad),
                               int(read.min_length or 0), int(read.min_new_tokens or 0))

    def apply(self, logits: torch.Tensor, cur_len: torch.Tensor, prompt_len: torch.Tensor,
              max_new_tokens) -> torch.Tensor:
        """logits (B, N, V) of slots whose next token extends a sequence of cur_len (B, N) tokens;
        prompt_len (B,) and max_new_tokens (an int, or (B, 1): each row's) per row."""
        low = float("-inf")
        new = cur_len - prompt_len[:, None]                          # (B, N) tokens generated so far
        begin = 1 if (prompt_len.max() == 1 and self.forced_bos is not None) else 0
        out = logits.clone()
        if self.suppress or self.bad_words:
            out[..., list(self.suppress) + list(self.bad_words)] = low
        if self.begin_suppress:
            out[..., list(self.begin_suppress)] = torch.where((new == begin)[..., None], low,
                                                             out[..., list(self.begin_suppress)])
        if self.eos and (self.min_length or self.min_new_tokens):
            early = ((cur_len < self.min_length) | (new < self.min_new_tokens))[..., None]
            out[..., list(self.eos)] = torch.where(early, low, out[..., list(self.eos)])
        for token, where in ((self.forced_bos, cur_len == 1), (self.forced_eos, new == max_new_tokens - 1)):
            if token is not None and bool(where.any()):
                forced = torch.full_like(out, low)
                forced[..., token] = 0.0
                out = torch.where(where[..., None], forced, out)
        return out

    @property
    def active(self) -> bool:
        return bool(self.forced_bos is not None or self.forced_eos is not None or self.suppress or self.begin_suppress
                    or self.bad_words or self.min_length or self.min_new_tokens)
