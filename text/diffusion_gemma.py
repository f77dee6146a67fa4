"""DiffusionGemma (transformers' `DiffusionGemmaForBlockDiffusion`) as a parasuite model: what
`text.load(folder)` returns for a folder whose config says `"model_type": "diffusion_gemma"`.

The family is a block-diffusion LM: an encoder reads the committed text into a K/V cache, and a
decoder denoises a canvas of `canvas_length` tokens that attends to that cache and to itself
(bidirectionally), predicting each canvas slot's own token. `DiffusionGemmaAdapter` exposes it as a
canvas model (`suite.draft.Canvas`): one forward = the encoder over a draft's committed-text slots
(their K/V kept in the suite's cache), then the decoder over its canvas slots, as the family's
`generate` calls them (`model.model.encoder`, then the model's forward without input_ids). Where rows
are dense (one prompt), the model sees the cache as the family's own cache shows it (`SlidingView`),
so the numbers are the family's bit for bit; ragged rows go through explicit masks (the same maths).
Decoders that apply: `diffusion_gemma` (the family's own sampler, equal to its `generate`) and the block commit rules (block_diffusion, fast_dllm_factor, prophet, credit,
entropy_bounded), whose unfilled canvas slots the adapter fills with uniform-noise tokens (the
family's canvas noise), drawn from a fixed hash of the position (the adapter keeps no RNG).
`text.load(folder)` gives a `text.TextGenerator` over this adapter (its `decoders` are the ones above;
"auto" means the family's sampler). No weights ship: bring a folder saved with `save_pretrained`
(model and tokenizer).
"""
from __future__ import annotations

from types import SimpleNamespace

import torch

from suite.cache import KVCache
from suite.models.adapters import AdapterConfig
from suite.registry import CANVAS_DECODERS as DECODERS

from .folders import check_folder, load_model, load_tokenizer
from suite.models.adapters import AdapterBase
from suite.models.capabilities import Capabilities

GENERATION_KEYS = ("max_denoising_steps", "t_min", "t_max", "stability_threshold", "confidence_threshold")
NOISE_MULTIPLIER = 2654435761      # Knuth's multiplicative hash: position -> a noise token


def refuse_settings(bidirectional, canvas_length, cache_implementation) -> None:
    """ValueError naming a folder setting no decoder here can honour (checked before the weights load)."""
    if bidirectional == "all":
        raise ValueError("text_config.use_bidirectional_attention='all' (a bidirectional encoder) cannot be "
                         "honoured: parasuite encodes committed text causally, a step at a time")
    if not isinstance(canvas_length, int) or canvas_length < 1:
        raise ValueError(f"the folder's config has canvas_length={canvas_length!r}: DiffusionGemma's sampler "
                         "needs a canvas length (the block size it was trained with); set canvas_length in config.json")
    if cache_implementation not in (None, "dynamic", "static"):
        raise ValueError(f"the folder's generation_config sets cache_implementation={cache_implementation!r}: "
                         "parasuite keeps its own exact cache (the numbers of 'dynamic'), so it cannot honour that; "
                         "remove the setting")


def generation_settings(model) -> dict:
    """The folder's own diffusion settings (its generation_config.json), None where unset."""
    gen = getattr(model, "generation_config", None)
    out = {k: getattr(gen, k, None) for k in GENERATION_KEYS}
    sampler = getattr(gen, "sampler_config", None)
    out["entropy_bound"] = getattr(sampler, "entropy_bound", None)
    return out


class DiffusionGemmaAdapter(AdapterBase):
    """`DiffusionGemmaForBlockDiffusion` as a suite canvas model (see the module docstring)."""

    capabilities = Capabilities(custom_mask=True, row_moves=True, canvas=True, only_decoders=DECODERS)

    def __init__(self, model):
        self.model = model.eval()
        self._param = next(model.parameters())
        cfg, text = model.config, model.config.text_config
        gen = getattr(model, "generation_config", None)
        refuse_settings(getattr(text, "use_bidirectional_attention", None), cfg.canvas_length,
                        getattr(gen, "cache_implementation", None))
        eos = getattr(gen, "eos_token_id", None)    # as the family's generate: only its generation config stops it
        eos = frozenset([eos] if isinstance(eos, int) else eos or ())
        pad = getattr(gen, "pad_token_id", None)
        pad = pad if pad is not None else (text.pad_token_id if text.pad_token_id is not None else 0)
        self.vocab_size = text.vocab_size
        self.window = getattr(text, "sliding_window", None) if "sliding_attention" in (text.layer_types or ()) else None
        self.sliding = [kind == "sliding_attention" for kind in text.layer_types]
        self.config = AdapterConfig(
            vocab_size=text.vocab_size, eos_token_ids=eos, pad_token_id=int(pad),
            max_length=text.max_position_embeddings,
            # mask_token_id: a sentinel outside the vocabulary, where the adapter puts noise
            extra={"mask_token_id": text.vocab_size,
                   "canvas_length": cfg.canvas_length, "generation": generation_settings(model)})

    @property
    def device(self) -> torch.device:
        return self._param.device

    def eval(self):
        return self

    def new_cache(self, batch: int, max_len: int | None = None) -> KVCache:
        return KVCache(batch, device=self.device)

    def noise(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """tokens with every mask sentinel replaced by a uniform-noise token (a hash of its position)."""
        hashed = (positions * NOISE_MULTIPLIER) % (2 ** 32) % self.vocab_size
        return torch.where(tokens >= self.vocab_size, hashed, tokens)

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0, canvas=None):
        """tokens/positions (B, N); attention_mask (B, 1, N, S+N) from the loop; canvas: the layout
        (suite.draft.Canvas). Returns (B, N - logits_from, V): each canvas slot's logits (its own
        token), zeros for committed-text slots. Records in `cache` the slots it wrote (the committed
        text's, padded to the longest row); the loop records none for a canvas draft."""
        if canvas is None:
            raise ValueError(f"DiffusionGemma denoises a canvas: decode with one of {', '.join(DECODERS)}")
        dev = self.device
        tokens, positions = self.noise(tokens.to(dev), positions.to(dev)), positions.to(dev)
        c = canvas.width
        starts = torch.tensor(canvas.starts, device=dev)
        lengths = torch.tensor(canvas.ends, device=dev) - starts                           # (B,) canvas slots per row
        width = int(lengths.max())
        idx = (starts[:, None] + torch.arange(width, device=dev)[None]).clamp(max=tokens.shape[1] - 1)   # (B, L)
        real = torch.arange(width, device=dev)[None] < lengths[:, None]                     # (B, L)
        s = cache.num_slots
        live = cache.valid.to(dev) if s else torch.zeros(tokens.shape[0], 0, dtype=torch.bool, device=dev)
        text = torch.arange(c, device=dev)[None] < starts[:, None]                          # (B, C)
        key_pos = torch.cat([cache.positions.to(dev), positions[:, :c]], 1)                 # (B, S+C)
        plain = not cache.holes and min(canvas.starts) == c and bool(real.all())    # no padding, no dead slot
        sliding = self.window is not None and not self._fits(positions, c)
        if c:     # the encoder writes the committed text's K/V into the cache, as the family's encoder does
            enc_cache = SlidingView(cache.backend, self.sliding, self.window) if plain and sliding else cache.backend
            enc_mask = None
            if not plain or sliding:
                enc_mask = self._encoder_mask(attention_mask.to(dev)[:, :, :c, :s + c], positions[:, :c], key_pos,
                                              truncate=plain)
            self.model.model.encoder(input_ids=tokens[:, :c], position_ids=positions[:, :c], attention_mask=enc_mask,
                                     cache=enc_cache)
        if plain:  # what the family's decoder reads: sliding layers' last `sliding_window - 1` slots, no masks
            view = SlidingView(cache.backend, self.sliding, self.window) if sliding else cache.backend
            dec_mask = {"full_attention": None, "sliding_attention": None}
        else:
            view = cache.backend
            dec_mask = self._decoder_mask(torch.cat([live, text], 1), key_pos, positions, starts, real)
        sc = canvas.self_conditioning
        out = self.model(
            cache=view, decoder_input_ids=tokens.gather(1, idx), decoder_position_ids=positions.gather(1, idx),
            decoder_attention_mask=dec_mask, self_conditioning_logits=None if sc is None else sc.to(dev),
            self_conditioning_mask=None if canvas.conditioned is None else canvas.conditioned.to(dev))
        logits = torch.zeros(tokens.shape[0], tokens.shape[1] - logits_from, out.logits.shape[-1],
                             dtype=out.logits.dtype, device=dev)
        rows, cols = real.nonzero(as_tuple=True)
        logits[rows, idx[rows, cols] - logits_from] = out.logits[rows, cols]
        # the slots this forward wrote: each row's committed text, all kept (a canvas takes no cache slot)
        cache.append(positions[:, :c], text, dense=min(canvas.starts, default=0) == c)
        return logits

    def _fits(self, positions: torch.Tensor, c: int) -> bool:
        """Whether no sliding-window layer would drop a key here (short sequences: the model's own masks)."""
        return self.window is None or int(positions.max()) < self.window - 1

    def _encoder_mask(self, mask: torch.Tensor, query_pos: torch.Tensor, key_pos: torch.Tensor,
                      truncate: bool = False) -> dict:
        """The loop's (B, 1, C, S+C) causal mask, and for sliding layers the same within the window
        (a key less than `sliding_window` positions back); truncate: over the keys a SlidingView's
        sliding layers return (the last `sliding_window - 1` cached ones, then the new ones)."""
        out = {"full_attention": mask}
        if self.window is not None:
            near = (query_pos[:, :, None] - key_pos[:, None, :]) < self.window
            sliding = mask & near[:, None]
            if truncate:
                c = query_pos.shape[1]
                sliding = sliding[..., -(min(key_pos.shape[1] - c, self.window - 1) + c):]
            out["sliding_attention"] = sliding
        return out

    def _decoder_mask(self, seen: torch.Tensor, key_pos: torch.Tensor, positions: torch.Tensor,
                      starts: torch.Tensor, real: torch.Tensor) -> dict:
        """(B, 1, L, S+C+L): every canvas slot sees the row's live cached text and its real canvas
        slots; sliding layers see only the last `sliding_window - 1` positions of the text (what the
        family's sliding cache layers keep)."""
        width = real.shape[1]
        keys = torch.cat([seen, real], 1)[:, None, None, :].expand(-1, 1, width, -1)
        out = {"full_attention": keys}
        if self.window is not None:
            last = positions.gather(1, starts[:, None]) - 1                                 # (B, 1) last text position
            recent = torch.cat([key_pos > last - (self.window - 1), real], 1)
            out["sliding_attention"] = keys & recent[:, None, None, :]
        return out


class SlidingView:
    """The suite cache's backend (every layer keeps every slot) as the family's DynamicCache shows it to
    the model: a sliding layer attends to its last `window - 1` cached slots (then the new ones). `update`
    still stores everything in the backend; the decoder only reads `layers`. Used where every row's
    slots are dense (no padding, no dead slot), so the last slots are the last positions."""

    is_compileable = False

    def __init__(self, backend, sliding: list[bool], window: int | None):
        self.backend, self.sliding, self.window = backend, sliding, window

    def _keep(self, i: int, new: int = 0):
        return self.window is not None and self.sliding[i], self.window - 1 + new if self.window else 0

    def update(self, keys, values, layer_idx, *args, **kwargs):
        """Store the new K/V; return what the family's layer returns: a sliding layer its last
        `window - 1` cached slots and the new ones."""
        k, v = self.backend.update(keys, values, layer_idx, *args, **kwargs)
        short, keep = self._keep(layer_idx, keys.shape[-2])
        return (k[:, :, -keep:], v[:, :, -keep:]) if short else (k, v)

    @property
    def layers(self):
        out = []
        for i, layer in enumerate(self.backend.layers):
            short, keep = self._keep(i)
            out.append(SimpleNamespace(keys=layer.keys[:, :, -keep:], values=layer.values[:, :, -keep:])
                       if short else layer)
        return out


def load_folder(path, device=None, dtype=torch.float32) -> tuple[DiffusionGemmaAdapter, object]:
    """A DiffusionGemma folder (config, weights, tokenizer) -> (its adapter, its tokenizer); settings no
    decoder can honour are refused before the weights load."""
    from transformers import DiffusionGemmaForBlockDiffusion

    from suite.runtime.storage import read_json

    folder = check_folder(path)
    cfg = read_json(folder / "config.json", default={})
    refuse_settings((cfg.get("text_config") or {}).get("use_bidirectional_attention"), cfg.get("canvas_length", 256),
                    read_json(folder / "generation_config.json", default={}).get("cache_implementation"))
    tok = load_tokenizer(folder, path)
    model = load_model(DiffusionGemmaForBlockDiffusion, folder, path, dtype, "DiffusionGemmaForBlockDiffusion")
    if device is not None:
        model.to(device)
    return DiffusionGemmaAdapter(model), tok
