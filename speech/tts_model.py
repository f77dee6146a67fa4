"""Phones -> codec frames: a transformers Llama backbone with per-codebook input embeddings
(summed) and per-codebook output heads (MusicGen, Copet et al. 2023), conditioned frame by frame
on an alignment (speech/alignment.py): every audio position adds embeddings of the phone of the
frame it predicts, its neighbours, the frames since that phone began and left in it, and a
progress bucket (frame / total frames). Phone durations come from flite at training time and
from the frame model's duration predictor (speech/duration.py) at inference, so decoding walks
the phones monotonically: no attention alignment to learn.

Two trained checkpoints share this class:
- `tts` (layout "frame"): one position per frame, tokens (B, N, Q). Trained on two layouts, named
  by the first prompt token: DELAY (codebook k shifted right by k: the `delay` decoder) and
  PARALLEL (codebooks aligned: the `parallel` decoder).
- `tts_flat` (layout "flat"): one position per code, tokens (B, N); code c of codebook q is id
  q*C + c (Q streams flattened frame by frame): the AR baseline (`flat` = suite's `ar`).

Ids of a stream: 0..V_code-1 codes, then BOS, EOS, PAD (zero embedding), DELAY, PARALLEL. The
prompt is just BOS (flat) or (DELAY|PARALLEL, PAD, ..., PAD), (BOS, ..., BOS) (frame).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from suite.runtime.storage import ConfigModule
from suite.models.adapters import AdapterBase
from suite.models.capabilities import Capabilities

WEIGHTS = Path(__file__).parent / "weights"


@dataclass
class TTSConfig:
    layout: str = "frame"          # "frame" (B, N, Q) tokens, or "flat" (B, N)
    num_codebooks: int = 4         # Q of the codec
    codebook_size: int = 256       # C of the codec
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    symbols: str = ""              # the phone set, space separated (alignment.PHONES)
    max_positions: int = 2048
    progress_buckets: int = 32     # a monotonic "how far into the utterance" hint per audio position
    max_count: int = 15            # frames since / left in a phone, clamped (alignment.MAX_COUNT)
    duration_hidden: int = 0       # > 0: a phone duration predictor of that width (the frame model)
    local_layers: int = 0          # > 0: a local transformer over the codebooks of a frame (local_ar, local_maskgit)
    local_hidden: int = 128
    local_frames: int = 1          # 2: the local transformer spans the next two frames (the `stack_local` decoder)
    stack_frames: int = 1          # 2: extra heads predict the frame after next too (the `stack` decoder)

    @property
    def phones(self) -> list[str]:
        return self.symbols.split()

    @property
    def cond_sizes(self) -> tuple[int, ...]:
        """Table sizes of the 6 conditioning ids (progress, prev/current/next phone, since, left);
        each table's last id marks a prompt position, the phones' one before it 'no phone'."""
        p, m = len(self.phones) + 2, self.max_count + 2
        return (self.progress_buckets + 1, p, p, p, m, m)

    @property
    def streams(self) -> int:
        return self.num_codebooks if self.layout == "frame" else 1

    @property
    def code_vocab(self) -> int:       # ids a head may predict before EOS
        return self.codebook_size if self.layout == "frame" else self.codebook_size * self.num_codebooks

    # the ids after the codes: BOS, EOS, PAD, DELAY, PARALLEL
    bos = property(lambda self: self.code_vocab)
    eos = property(lambda self: self.code_vocab + 1)
    pad = property(lambda self: self.code_vocab + 2)
    delay_token = property(lambda self: self.code_vocab + 3)
    parallel_token = property(lambda self: self.code_vocab + 4)
    out_vocab = property(lambda self: self.code_vocab + 2, doc="ids a head scores: codes, BOS (never predicted), EOS")
    in_vocab = property(lambda self: self.code_vocab + 5, doc="ids of an input stream")

    def phone_ids(self, phones: list[str]) -> list[int]:
        bad = sorted({p for p in phones if p not in self.phones})
        if bad:
            raise ValueError(f"phones {' '.join(bad)!r} are not in the TTS phone set; "
                             "use plain English text (letters, digits spelled out, punctuation)")
        return [self.phones.index(p) for p in phones]


class TTSModel(ConfigModule, nn.Module):
    model_type, config_class, what = "parasuite-codebook-tts", TTSConfig, "TTS"
    train_command = "python -m speech.train tts"

    def __init__(self, config: TTSConfig):
        super().__init__()
        from transformers import LlamaConfig, LlamaModel
        self.config = c = config
        self.embed = nn.ModuleList(nn.Embedding(c.in_vocab, c.hidden_size, padding_idx=c.pad)
                                   for _ in range(c.streams))
        self.backbone = LlamaModel(LlamaConfig(
            vocab_size=8, hidden_size=c.hidden_size, intermediate_size=3 * c.hidden_size,
            num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads, num_key_value_heads=c.num_heads,
            max_position_embeddings=c.max_positions, attn_implementation="sdpa"))
        self.backbone.embed_tokens = None   # inputs arrive as embeddings
        self.heads = nn.ModuleList(nn.Linear(c.hidden_size, c.out_vocab, bias=False) for _ in range(c.streams))
        self.cond = nn.ModuleList(nn.Embedding(n, c.hidden_size) for n in c.cond_sizes)
        if c.duration_hidden:
            from .duration import DurationPredictor
            self.duration = DurationPredictor(len(c.phones), c.duration_hidden)
        self.add_heads()

    def add_heads(self) -> None:
        """The optional heads of the frame layout (created from the config; absent in old checkpoints)."""
        from .local_head import LocalTransformer
        c = self.config
        if c.local_layers and not hasattr(self, "local"):
            self.local = LocalTransformer(c.hidden_size, c.num_codebooks * c.local_frames, c.out_vocab,
                                          c.local_hidden, c.local_layers)
        if c.stack_frames > 1 and not hasattr(self, "stack_heads"):
            # (S-1) x Q heads: head [s-1][q] predicts codebook q of the frame s steps after the next
            self.stack_heads = nn.ModuleList(nn.Linear(c.hidden_size, c.out_vocab, bias=False)
                                             for _ in range((c.stack_frames - 1) * c.num_codebooks))

    def condition_ids(self, positions: torch.Tensor, audio_start: torch.Tensor, tables,
                      lengths: torch.Tensor | None = None) -> torch.Tensor:
        """positions (B, N), each row's BOS position (B,) and frame conditioning (the rows' (T_b, 5)
        tables from alignment.frame_conditioning, or `pad_tables`' (B, T, 5) and (B,) lengths) ->
        (B, N, 6) ids: progress bucket floor(frame / T * buckets), then the frame's 5 ids. A position
        predicts frame (position - BOS position) // (1 or Q); frames past T reuse frame T-1's ids;
        prompt positions get each table's last id."""
        c = self.config
        padded, lengths = self.pad_tables(tables) if lengths is None else (tables, lengths)
        per_frame = 1 if c.layout == "frame" else c.num_codebooks
        frame = torch.div(positions - audio_start.to(positions)[:, None], per_frame, rounding_mode="floor")
        prompt = torch.tensor(c.cond_sizes, device=positions.device) - 1
        t = lengths.to(positions)[:, None]                                            # (B, 1)
        bucket = (frame.double() / t * c.progress_buckets).floor().long().clamp(0, c.progress_buckets - 1)
        index = torch.minimum(frame.clamp(min=0), t - 1)                              # (B, N)
        rows = torch.cat([bucket[..., None], padded.to(positions.device).gather(
            1, index[..., None].expand(-1, -1, padded.shape[-1]))], -1)
        return torch.where((frame < 0)[..., None], prompt, rows)

    def pad_tables(self, tables: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows' (T_b, 5) frame conditioning -> (B, T, 5) zero-padded and the (B,) lengths; an empty
        table reads as one frame of the prompt's ids."""
        device = tables[0].device
        none = torch.tensor(self.config.cond_sizes[1:], device=device) - 1
        tables = [t if len(t) else none[None].to(t) for t in tables]
        n = max(len(t) for t in tables)
        padded = torch.stack([torch.cat([t, t.new_zeros(n - len(t), t.shape[1])]) for t in tables])
        return padded, torch.tensor([len(t) for t in tables], device=padded.device)

    def durations(self, phone_ids: list[int]) -> list[int]:
        """Frames per phone from the duration predictor (the frame model's)."""
        if not hasattr(self, "duration"):
            raise ValueError("this TTS checkpoint has no duration predictor (duration_hidden=0)")
        return self.duration.frames(phone_ids)

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, N, Q) or (B, N) ids -> (B, N, D): the sum of the streams' embeddings."""
        if tokens.dim() == 2:
            tokens = tokens[..., None]
        return sum(self.embed[q](tokens[..., q]) for q in range(tokens.shape[-1]))

    def forward(self, tokens, cond, position_ids=None, attention_mask=None, cache=None, logits_from: int = 0):
        """tokens (B, N[, Q]), conditioning ids (B, N, 6) -> logits (B, N - logits_from, Q, V) for
        frames, (B, N - logits_from, V) flat."""
        logits = self.head_logits(self.hidden(tokens, cond, position_ids, attention_mask, cache, logits_from))
        return logits if self.config.layout == "frame" else logits[:, :, 0]

    def hidden(self, tokens, cond, position_ids=None, attention_mask=None, cache=None, logits_from: int = 0):
        """-> the backbone's last hidden states (B, N - logits_from, D)."""
        x = self.embed_tokens(tokens) + sum(emb(cond[..., i]) for i, emb in enumerate(self.cond))
        out = self.backbone(inputs_embeds=x, position_ids=position_ids,
                            attention_mask=attention_mask, cache=cache, use_cache=cache is not None)
        return out.last_hidden_state[:, logits_from:]

    def head_logits(self, h: torch.Tensor) -> torch.Tensor:
        """(..., D) -> (..., Q, V): the next frame's codebooks, each head on its own."""
        return _no_bos(torch.stack([head(h) for head in self.heads], -2), self.config.bos)

    def stack_logits(self, h: torch.Tensor) -> torch.Tensor:
        """(..., D) -> (..., S, Q, V): the next S frames' codebooks (S = stack_frames), all from one state."""
        c = self.config
        if c.stack_frames < 2:
            raise ValueError("this TTS checkpoint has no stacked heads (stack_frames=1); retrain with "
                             "`python -m speech.train tts`")
        later = torch.stack([head(h) for head in self.stack_heads], -2)
        later = later.unflatten(-2, (c.stack_frames - 1, c.num_codebooks))
        return torch.cat([self.head_logits(h)[..., None, :, :], _no_bos(later, c.bos)], -3)

    def local_logits(self, h: torch.Tensor, codes: torch.Tensor, mode: str) -> torch.Tensor:
        """h (M, D), codes (M, n) (MASK = out_vocab where unknown; n <= local_frames * Q, frame by
        frame) -> (M, n, V) of the local transformer."""
        if not hasattr(self, "local"):
            raise ValueError("this TTS checkpoint has no local transformer (local_layers=0); retrain with "
                             "`python -m speech.train tts`")
        return _no_bos(self.local(h, codes, mode), self.config.bos)

    @classmethod
    def load(cls, folder: Path | str, **new_heads) -> "TTSModel":
        """new_heads (e.g. local_layers=2, stack_frames=2) add freshly initialised heads to a checkpoint
        that lacks them (training continues from its backbone)."""
        model = super().load(folder)
        if new_heads:
            for k, v in new_heads.items():
                setattr(model.config, k, v)
            model.add_heads()
        return model.eval()


def _no_bos(logits: torch.Tensor, bos: int) -> torch.Tensor:
    logits[..., bos] = float("-inf")       # BOS is an input, never an output
    return logits


# ---------------------------------------------------------------- layouts (pure functions; the delay layout: suite.decoders.frames.delay)

def flatten_codes(codes: torch.Tensor, codebook_size: int) -> torch.Tensor:
    """codes (Q, T) -> flat ids (T*Q,) frame by frame, id = q*C + c."""
    q = codes.shape[0]
    return (codes + torch.arange(q, device=codes.device)[:, None] * codebook_size).T.reshape(-1)


def unflatten_codes(flat: torch.Tensor, num_codebooks: int, codebook_size: int) -> torch.Tensor:
    """flat ids (T*Q,) -> codes (Q, T)."""
    t = flat.numel() // num_codebooks
    grid = flat[:t * num_codebooks].reshape(t, num_codebooks).T
    return grid - torch.arange(num_codebooks, device=flat.device)[:, None] * codebook_size


# ---------------------------------------------------------------- adapters

class _TTSAdapter(AdapterBase):
    """A row's BOS position and frame conditioning travel in its cache (`cache.row_inputs`, put
    there by the adapter `for_request` binds), so rows of different requests run together through
    any adapter of the model (suite.scheduler moves them)."""

    capabilities = Capabilities(custom_mask=True, row_moves=True)
    request_inputs: dict | None = None

    def for_request(self, audio_start: list[int], tables: list[torch.Tensor]):
        """A copy bound to one request: each row's BOS position and frame conditioning (T, 5)
        (alignment.frame_conditioning), put into every cache it makes. The shared adapter stays
        unbound, so requests never meet."""
        bound = copy.copy(self)
        padded, lengths = self.model.pad_tables([t.to(self.device) for t in tables])
        bound.request_inputs = {"audio_start": torch.tensor(audio_start, device=self.device)[:, None],
                                "tables": padded, "table_lengths": lengths[:, None]}
        return bound

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def new_cache(self, batch: int, max_len: int | None = None):
        from suite import KVCache
        cache = KVCache(batch, device=self.device)
        if self.request_inputs is not None:
            if len(self.request_inputs["audio_start"]) != batch:
                raise ValueError(f"the adapter is bound to {len(self.request_inputs['audio_start'])} rows, not {batch}: "
                                 "bind it with adapter.for_request(audio_start, tables), one entry per row")
            cache.row_inputs.update(self.request_inputs)
        return cache

    @staticmethod
    def _rows(cache) -> dict:
        if "audio_start" not in cache.row_inputs:
            raise ValueError("decode with adapter.for_request(audio_start, tables), a copy bound to the request")
        return cache.row_inputs

    def _conditioning(self, positions: torch.Tensor, cache) -> torch.Tensor:
        rows = self._rows(cache)
        return self.model.condition_ids(positions, rows["audio_start"][:, 0], rows["tables"], rows["table_lengths"][:, 0])


class FrameTTSAdapter(_TTSAdapter):
    """ModelAdapter of the frame model: tokens (B, N, Q) -> by `output`:
    "frame" logits (B, N', Q, V) (delay, parallel); "stack" logits (B, N', S, Q, V) of the next S
    frames (stack); "local" a suite LocalHeadOutput: hidden (B, N', D) + the local transformer
    (local_ar, local_maskgit; stack_local when it spans two frames)."""

    OUTPUTS = ("frame", "stack", "local")

    def __init__(self, model: TTSModel, output: str = "frame"):
        from suite import AdapterConfig
        if output not in self.OUTPUTS:
            raise ValueError(f"output must be one of {self.OUTPUTS}, got {output!r}")
        c = model.config
        self.model, self.output = model, output
        self.config = AdapterConfig(vocab_size=c.out_vocab, eos_token_ids=frozenset({eos_frame(c)}),
                                    pad_token_id=c.pad, max_length=c.max_positions,
                                    extra={"codebooks": c.num_codebooks, "bos": c.bos, "eos": c.eos, "pad": c.pad,
                                           "output": output})

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        h = self.model.hidden(tokens, self._conditioning(positions, cache), positions, attention_mask, cache.backend,
                              logits_from)
        if self.output == "frame":
            return self.model.head_logits(h)
        if self.output == "stack":
            return self.model.stack_logits(h)
        from suite.decoders.frames.base import LocalHeadOutput
        c = self.model.config
        return LocalHeadOutput(h, self.model.local_logits, mask_id=c.out_vocab, frames=c.local_frames)


def eos_frame(config: TTSConfig) -> tuple:
    """The committed marker that ends a frame-model row (all streams EOS)."""
    return (config.eos,) * config.num_codebooks


class FlatTTSAdapter(_TTSAdapter):
    """ModelAdapter of the flat model: tokens (B, N) -> logits (B, N', V). A grammar keeps the
    stream well formed: the j-th code after the prompt comes from codebook j mod Q, and EOS may
    only start a frame. `for_request` binds each row's BOS position before decoding."""

    def __init__(self, model: TTSModel):
        from suite import AdapterConfig
        c = model.config
        self.model = model
        self.config = AdapterConfig(vocab_size=c.out_vocab, eos_token_ids=frozenset({c.eos}), pad_token_id=c.pad,
                                    max_length=c.max_positions, extra={"codebooks": c.num_codebooks})

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        logits = self.model(tokens, self._conditioning(positions, cache), positions, attention_mask, cache.backend,
                            logits_from)
        return logits + self.grammar(positions[:, logits_from:], self._rows(cache)["audio_start"][:, 0])

    def grammar(self, positions: torch.Tensor, audio_start: torch.Tensor) -> torch.Tensor:
        """(B, N) positions, (B,) BOS positions -> (B, N, V) additive mask: 0 allowed, -inf not."""
        c = self.model.config
        j = positions - audio_start.to(positions)[:, None]               # index of the predicted code
        q = j.remainder(c.num_codebooks)
        ids = torch.arange(c.out_vocab, device=positions.device)
        book = torch.div(ids, c.codebook_size, rounding_mode="floor")    # (V,) codebook of each id
        allowed = (book[None, None] == q[..., None]) & (ids < c.code_vocab)
        allowed |= (ids == c.eos) & (q[..., None] == 0)
        allowed |= (j < 0)[..., None]                                    # inside the prompt: anything
        return torch.zeros(allowed.shape, device=positions.device).masked_fill(~allowed, float("-inf"))
