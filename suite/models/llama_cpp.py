"""The llama.cpp engine: a GGUF file at its own type (F32, BF16, Q8_0, Q4_K_M, ...) behind the adapter contract.

`LlamaCppLM(path)` is a `ModelAdapter` over llama-cpp-python's low-level API: one llama.cpp context holds
every row of every request as a sequence (`seq_id`); a forward is one `llama_decode` of a batch whose
tokens carry their row's sequence, their logical position and a logits flag (slots from `logits_from` on);
`llama_get_logits_ith` reads them back. Rejected tails leave with `llama_memory_seq_rm`
(suite.models.llama_cpp_cache). The context starts small (START_CTX tokens) and grows on demand, to the next
power of two up to the file's training context: a request's room (prompts + max_new_tokens per row) is reserved when
it is checked, and a full context grows at the decode that fills it; live rows' K/V move over as they are (sequence
state copies), so growing changes no logits. An explicit n_ctx stays fixed. Chain decoders (ar, jacobi, ngram, sjd,
sam_decoding without trees, auto) run on it unchanged; llama.cpp masks by sequence and position only, so
`custom_mask` is False and tree decoders are refused by `suite.prepare` (or fall back to chains where they can).

Exactness: llama.cpp multiplies F32, F16 and BF16 matrices by one token with vec_dot and by two or more with
llamafile's GEMM, whose sums differ in the last bits; for the quantized types both agree to the bit. `min_width`
(default: `exact_width` of the file: 1 for quantized files, 2 for float ones) pads every forward to at least that
many tokens with scratch tokens in a sequence of their own (removed at once) and reads at least that many rows of
logits (llama.cpp runs the last layer and the head on the rows read only), so a plain step and a verification take
the same kernels and every lossless decoder gives `ar`'s tokens. K-quant tensors (Q4_K_M files) would switch to a
tiled kernel from eight tokens on: the engine turns it off ($GGML_CPU_TILED_MM=0, unless set otherwise, then
such files pad to eight: `exact_width`).
"""
from __future__ import annotations

import atexit
import ctypes
import os
import threading
import weakref
from pathlib import Path

import numpy as np
import torch

from .adapters import AdapterBase, AdapterConfig
from .capabilities import Capabilities
from .llama_cpp_cache import LlamaCppCache

INSTALL_FIX = ("the llama.cpp engine needs llama-cpp-python, built from source: "
               "bash scripts/setup.sh (or see requirements/optional/llama-cpp.txt for the pip command)")
BATCH = 256        # tokens per llama_decode (a longer prefill goes in several)
UBATCH = 64        # tokens per graph llama.cpp computes: its compute buffer holds UBATCH rows of logits
START_CTX = 256    # the context at load (no n_ctx given): its K/V (F16) is 5.6 MiB for SmolLM2, resident at once;
                   # 2048 (45 MiB) put a Q4_K_M file at 1.66x its size after load (BENCHMARKS.md)
MAX_ROWS = 16      # rows (sequences) at once: the scheduler's default; llama.cpp reserves a row of logits for each
SCRATCH_TOKEN = 0  # what pads a forward to min_width (any id: its logits are never read)


def import_llama_cpp():
    """llama_cpp, with llama.cpp's own log lines off and its tiled K-quant matmul off (`exact_width`);
    ImportError naming the install command."""
    os.environ.setdefault(TILED_ENV, "0")    # read once, at llama.cpp's first matmul in this process
    try:
        import llama_cpp
    except ImportError as e:
        raise ImportError(INSTALL_FIX) from e
    _quiet(llama_cpp)
    return llama_cpp


_LOG_OFF = None


def _quiet(llama_cpp) -> None:
    """Send llama.cpp's log (model metadata, buffer sizes) nowhere; errors still raise here."""
    global _LOG_OFF
    if _LOG_OFF is None:
        _LOG_OFF = llama_cpp.llama_log_callback(lambda level, text, data: None)
        llama_cpp.llama_log_set(_LOG_OFF, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()


class LlamaCppEngine:
    """One GGUF model and one llama.cpp context: sequences handed out to rows, batches decoded.
    n_ctx None: the context starts at START_CTX tokens and grows up to the file's training context
    (`max_ctx`; `reserve`, `_grow`); given: fixed at n_ctx. Every call into llama.cpp happens in the
    thread that steps (the scheduler's): rows take and free sequences from any thread, and freed
    sequences are only queued here and emptied before the next decode."""

    def __init__(self, path, n_ctx: int | None = None, threads: int | None = None, max_rows: int = MAX_ROWS,
                 flash_attn: bool = True, extra_buffers: bool = False):
        ll = self.ll = import_llama_cpp()
        self.path = Path(path).expanduser()
        if not self.path.is_file():
            raise ValueError(f"no GGUF file at {str(path)!r}: pass an existing local .gguf file")
        mp = ll.llama_model_default_params()
        mp.use_extra_bufts = extra_buffers    # repacked weights: another kernel per batch width (see module doc)
        self.model = ll.llama_model_load_from_file(str(self.path).encode(), mp)
        if not self.model:
            raise ValueError(f"llama.cpp cannot read {str(path)!r}: pass a GGUF file of an architecture llama.cpp "
                             "knows (llama, qwen2, mistral, gemma, phi3, ...)")
        self.vocab = ll.llama_model_get_vocab(self.model)
        self.n_vocab = ll.llama_vocab_n_tokens(self.vocab)
        self.threads = threads or torch.get_num_threads()
        self.flash_attn = flash_attn
        self.max_ctx = n_ctx or ll.llama_model_n_ctx_train(self.model) or START_CTX
        cp = self._params = ll.llama_context_default_params()
        cp.n_batch, cp.n_ubatch = BATCH, UBATCH
        cp.n_seq_max = max_rows + 1                 # the last sequence holds scratch tokens
        cp.kv_unified = True                        # rows share the cells: any mix of lengths fits
        cp.n_threads = cp.n_threads_batch = self.threads
        cp.flash_attn_type = ll.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else ll.LLAMA_FLASH_ATTN_TYPE_DISABLED
        cp.no_perf = True
        self.ctx = None
        try:
            self._use(self._context(min(START_CTX, self.max_ctx) if n_ctx is None else n_ctx))
        except ValueError:
            ll.llama_model_free(self.model)
            raise
        self.max_ctx = max(self.max_ctx, self.n_ctx)   # llama.cpp may round a given n_ctx up
        self._want = self.n_ctx                     # the size `reserve` asked for (grown at the next decode)
        atexit.register(_close_at_exit, weakref.ref(self))   # freed before Python tears its modules down
        self.scratch_seq = max_rows
        self._free = list(range(max_rows))
        self._stale: list[int] = []                 # freed sequences whose cells the next decode removes
        self._lock = threading.Lock()
        self._batch = _Batch(ll, BATCH)

    # -- the context: built, grown -----------------------------------------------------------------

    def _context(self, n_ctx: int):
        self._params.n_ctx = n_ctx
        ctx = self.ll.llama_init_from_model(self.model, self._params)
        if not ctx:
            raise ValueError(f"llama.cpp cannot make a context of {n_ctx} tokens for {str(self.path)!r}")
        return ctx

    def _use(self, ctx) -> None:
        self.ctx, self.memory, self.n_ctx = ctx, self.ll.llama_get_memory(ctx), self.ll.llama_n_ctx(ctx)

    def reserve(self, n_tokens: int) -> None:
        """Ask for a context of at least `n_tokens` (capped at max_ctx; any thread): the next decode grows it."""
        with self._lock:
            self._want = max(self._want, min(self.max_ctx, n_tokens))

    def _grow(self, n_tokens: int) -> bool:
        """Move to a context of the next power of two holding `n_tokens` (at most max_ctx), the cached
        positions of every sequence copied over as they are (llama_state_seq_*: the same K/V bits).
        False: the context is that large already."""
        size = min(self.max_ctx, 1 << max(n_tokens - 1, 0).bit_length())
        if size <= self.n_ctx:
            return False
        ll = self.ll
        ctx = self._context(size)
        for seq in range(self.scratch_seq):
            if ll.llama_memory_seq_pos_max(self.memory, seq) < 0:
                continue                            # an empty row: nothing to move
            buf = (ctypes.c_uint8 * ll.llama_state_seq_get_size(self.ctx, seq))()
            n = ll.llama_state_seq_get_data(self.ctx, buf, len(buf), seq)
            if not n or ll.llama_state_seq_set_data(ctx, buf, n, seq) != n:
                ll.llama_free(ctx)
                raise RuntimeError(f"llama.cpp could not move sequence {seq} into a context of {size} tokens")
        ll.llama_free(self.ctx)
        self._use(ctx)
        return True

    # -- sequences ---------------------------------------------------------------------------------

    def take_seqs(self, n: int) -> list[int]:
        """`n` sequences for new rows (any thread): a freed one is emptied before the next decode."""
        with self._lock:
            if n > len(self._free):
                raise ValueError(f"the llama.cpp context holds {self.scratch_seq} rows at once and {n} more are "
                                 "asked: load it with more max_rows, or send fewer rows at a time")
            seqs, self._free = self._free[:n], self._free[n:]
        return seqs

    def release_seqs(self, seqs: list[int]) -> None:
        """Free sequences for reuse (any thread): their cells are removed before the next decode."""
        with self._lock:
            self._free.extend(seqs)
            self._stale.extend(seqs)

    def _drain(self) -> None:
        with self._lock:
            gone, self._stale = self._stale, []
        for s in gone:
            self.seq_rm(s, -1, -1)

    def seq_rm(self, seq: int, p0: int, p1: int) -> None:
        if not self.ll.llama_memory_seq_rm(self.memory, seq, p0, p1):
            raise RuntimeError(f"llama.cpp could not remove positions {p0}.. of sequence {seq}")

    # -- forwards ----------------------------------------------------------------------------------

    def decode(self, tokens, positions, seqs, wants, min_width: int) -> torch.Tensor:
        """One forward of tokens (numpy arrays in batch order: token, position, sequence, whether its logits are
        wanted) -> the wanted logits (n, V) in order. Split into BATCH-sized decodes; one narrower than `min_width`
        is padded with scratch tokens (removed after), and each reads at least `min_width` rows (module doc).
        The context grows first to the size `reserve` asked for, and again whenever a decode finds it full."""
        self._drain()
        if self._want > self.n_ctx:
            self._grow(self._want)
        rows, padded = [], False
        for start in range(0, len(tokens), BATCH):
            part = slice(start, start + BATCH)
            tok, pos, seq, want = tokens[part], positions[part], seqs[part], wants[part]
            if len(tok) < min_width:       # only a lone or last chunk is this narrow: one padded per call
                k = min_width - len(tok)
                tok, pos = np.r_[tok, np.full(k, SCRATCH_TOKEN)], np.r_[pos, np.arange(k)]
                seq, want = np.r_[seq, np.full(k, self.scratch_seq)], np.r_[want, np.zeros(k, bool)]
                padded = True
            rows.append(self._decode_chunk(tok, pos, seq, want, min_width))
        if padded:
            self.seq_rm(self.scratch_seq, -1, -1)
        return rows[0] if len(rows) == 1 else torch.cat(rows)

    def _decode_chunk(self, tok, pos, seq, want, min_width: int) -> torch.Tensor:
        ll, n_want = self.ll, int(want.sum())
        read = want.astype(np.int8)
        if 0 < n_want < min_width:        # the last layer and the head run on the rows read: as wide as min_width
            read[np.flatnonzero(~want)[n_want - min_width:]] = 1
        batch = self._batch.fill(tok, pos, seq, read)
        rc = ll.llama_decode(self.ctx, batch)
        while rc == 1 and self._grow(self.n_ctx + 1):   # no room (nothing was written): a context twice as large
            rc = ll.llama_decode(self.ctx, batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode failed ({rc}): the context ({self.n_ctx} tokens) may be full; "
                               "load the model with a larger n_ctx or decode fewer tokens")
        if n_want == 0:
            return torch.empty(0, self.n_vocab, device="cpu")
        n_read = int(read.sum())
        buf = ctypes.cast(ll.llama_get_logits(self.ctx), ctypes.POINTER(ctypes.c_float * (n_read * self.n_vocab)))
        logits = torch.frombuffer(buf.contents, dtype=torch.float32).view(n_read, self.n_vocab)
        return logits.clone() if n_read == n_want else logits[torch.from_numpy(want[read.astype(bool)])]

    # -- the file ----------------------------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = self.ll.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace") if n >= 0 else None

    def eos_ids(self) -> frozenset[int]:
        ids = (self.ll.llama_vocab_eos(self.vocab), self.ll.llama_vocab_eot(self.vocab))
        return frozenset(int(i) for i in ids if i >= 0)

    def close(self) -> None:
        if getattr(self, "ctx", None):
            self.ll.llama_free(self.ctx)
            self.ll.llama_model_free(self.model)
            self.ctx = self.model = None

    def __del__(self):
        try:
            self.close()
        except Exception:      # interpreter shutdown: llama_cpp may be gone already
            pass


class _Batch:
    """A llama_batch over numpy arrays of `capacity` tokens, one sequence each, filled in bulk and reused."""

    def __init__(self, ll, capacity: int):
        self.token, self.pos, self.seq = (np.zeros(capacity, np.int32) for _ in range(3))
        self.n_seq, self.logits = np.ones(capacity, np.int32), np.zeros(capacity, np.int8)
        first = self.seq.ctypes.data
        self._seq_ptrs = (ctypes.c_void_p * capacity)(*range(first, first + 4 * capacity, 4))
        b = self.struct = ll.llama_batch()
        b.token = self.token.ctypes.data_as(ctypes.POINTER(ll.llama_token))
        b.pos = self.pos.ctypes.data_as(ctypes.POINTER(ll.llama_pos))
        b.n_seq_id = self.n_seq.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        b.seq_id = ctypes.cast(self._seq_ptrs, ctypes.POINTER(ctypes.POINTER(ll.llama_seq_id)))
        b.logits = self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))

    def fill(self, tokens, positions, seqs, logits):
        n = len(tokens)
        self.token[:n], self.pos[:n], self.seq[:n], self.logits[:n] = tokens, positions, seqs, logits
        self.struct.n_tokens = n
        return self.struct


def _close_at_exit(engine_ref) -> None:
    engine = engine_ref()
    if engine is not None:
        engine.close()


class LlamaCppLM(AdapterBase):
    """A GGUF file on llama.cpp as a ModelAdapter. Logits (B, N - logits_from, V) float32 on the CPU; rows
    are sequences of one context shared by all rows: `n_ctx` tokens, fixed, or by default START_CTX
    growing on demand up to the file's training context (`config.max_length`: the most it holds);
    `min_width` pads every forward to that many tokens (exactness, module doc; None: `exact_width` of the
    file, 1, 2 or 8)."""

    capabilities = Capabilities(row_moves=True, plain_mask=True, cost_model=True)

    def __init__(self, path, n_ctx: int | None = None, threads: int | None = None, max_rows: int = MAX_ROWS,
                 min_width: int | None = None, flash_attn: bool = True, extra_buffers: bool = False,
                 eos_token_id=None, pad_token_id=None):
        self.engine = LlamaCppEngine(path, n_ctx, threads, max_rows, flash_attn, extra_buffers)
        self.min_width = int(min_width) if min_width is not None else exact_width(self.engine.path)
        eos = self.engine.eos_ids() if eos_token_id is None else frozenset(
            [eos_token_id] if isinstance(eos_token_id, int) else eos_token_id)
        pad = pad_token_id if pad_token_id is not None else min(eos, default=0)
        self.config = AdapterConfig(vocab_size=self.engine.n_vocab, eos_token_ids=eos, pad_token_id=int(pad),
                                    max_length=self.engine.max_ctx, extra={"engine": "llama.cpp"})

    device = torch.device("cpu")

    def eval(self):
        return self

    def cost_identity(self) -> list[str]:
        e, st = self.engine, os.stat(self.engine.path)
        return [type(self).__name__, str(e.path.resolve()), str(st.st_size), str(st.st_mtime_ns),
                f"threads {e.threads} ctx {e.max_ctx} fa {e.flash_attn} w {self.min_width}"]

    def new_cache(self, batch: int, max_len: int | None = None) -> LlamaCppCache:
        return LlamaCppCache(batch, self.engine)

    def check_request(self, rows: list[list[int]], max_new_tokens: int) -> None:
        """Refuse a request beyond the largest context; reserve room for it (the context grows at the next decode)."""
        need = sum(len(r) for r in rows) + len(rows) * max_new_tokens
        if need > self.engine.max_ctx:
            raise ValueError(f"the llama.cpp context holds {self.engine.max_ctx} tokens and this request needs up to "
                             f"{need} (its prompts + max_new_tokens per row): load the GGUF with a larger n_ctx, or "
                             "ask for fewer new tokens")
        self.engine.reserve(need)

    def __call__(self, tokens, positions, cache: LlamaCppCache, attention_mask, logits_from: int = 0, **kwargs):
        if kwargs.get("output_hidden") or kwargs.get("canvas") is not None:
            raise ValueError("the llama.cpp engine returns logits only (no hidden states, no canvas)")
        B, N = tokens.shape
        # the batch is built in numpy (a few microseconds an op, where a torch op on these small tensors costs
        # tens): tokens and positions live on the host, as llama.cpp's inputs and logits do
        tok, pos = tokens.numpy(), positions.numpy()
        filled = np.asarray(cache.filled, dtype=np.int64)
        # each row's real slots: those continuing its cached positions one by one (padding sits at position 0)
        real = np.logical_and.accumulate(pos == filled[:, None] + np.arange(N), axis=1)
        n = real.sum(1)
        cache.filled, cache.submitted = (filled + n).tolist(), n.tolist()
        want = real.copy()
        want[:, :logits_from] = False
        width, vocab = max(N - logits_from, 0), self.config.vocab_size
        if not n.any():
            return positions.new_zeros(B, width, vocab, dtype=torch.float32)
        seqs = np.broadcast_to(np.asarray(cache.seqs, dtype=np.int32)[:, None], (B, N))
        rows = self.engine.decode(tok[real].astype(np.int32), pos[real].astype(np.int32), seqs[real], want[real],
                                  self.min_width)
        want = want[:, logits_from:]
        if want.all():
            return rows.view(B, width, vocab)
        out = torch.zeros(B, width, vocab)       # host: llama.cpp's logits live in host memory
        out[torch.from_numpy(want)] = rows
        return out


# GGUF tensor types whose matmul takes llama.cpp's tiled K-quant kernel from TILED_WIDTH tokens on (vec_dot below),
# unless $GGML_CPU_TILED_MM is 0: this engine sets it so (a forward padded to 8 tokens cost 4x one of 2 here)
TILED_ENV = "GGML_CPU_TILED_MM"
TILED_TYPES = {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S",
               "IQ1_S", "IQ1_M"}
TILED_WIDTH = 8


# GGUF matrix types whose one-token vec_dot and many-token GEMM give the same bits (measured on the setup's build:
# Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K files at widths 1 to 16); F32, F16 and BF16 do not
VEC_EXACT_TYPES = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"}


def exact_width(path) -> int:
    """The narrowest forward whose kernels give the bits of every wider one, for this file's matrix types: one
    token where they all are in VEC_EXACT_TYPES, eight where a K-quant matrix takes the tiled kernel from eight
    tokens on ($GGML_CPU_TILED_MM is not 0), else two (llama.cpp's GEMM instead of one token's vec_dot)."""
    types = gguf_matrix_types(path)
    if types & TILED_TYPES and os.environ.get(TILED_ENV, "1") != "0":
        return TILED_WIDTH
    return 1 if types <= VEC_EXACT_TYPES else 2


# ggml's tensor type ids (ggml.h, enum ggml_type) -> names; ids missing here read as "type <id>" (not exact)
GGML_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1", 10: "Q2_K",
              11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS",
              19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32",
              27: "I64", 28: "F64", 29: "IQ1_M", 30: "BF16", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4"}
# GGUF metadata value types: fixed sizes in bytes (8: string, 9: array are read apart)
_GGUF_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def gguf_matrix_types(path) -> set[str]:
    """The types of a GGUF file's matrices (tensors with two or more dimensions over 1), read from its header
    alone: the metadata (a vocabulary of tens of thousands of strings) is skipped, not parsed into objects
    (gguf.GGUFReader's parse kept about 13 MiB resident for SmolLM2's)."""
    import struct

    def u32(f):
        return struct.unpack("<I", f.read(4))[0]

    def u64(f):
        return struct.unpack("<Q", f.read(8))[0]

    def skip_value(f, kind: int, count: int = 1) -> None:
        if kind == 8:                           # strings: a length, then the bytes
            for _ in range(count):
                f.seek(u64(f), 1)
        elif kind == 9:                         # an array: element type, count, elements
            for _ in range(count):
                inner = u32(f)
                skip_value(f, inner, u64(f))
        else:
            f.seek(_GGUF_SIZES[kind] * count, 1)

    with open(path, "rb", buffering=1 << 20) as f:
        if f.read(4) != b"GGUF" or u32(f) < 2:
            raise ValueError(f"{str(path)!r} is not a GGUF file of version 2 or later: pass a .gguf file")
        n_tensors, n_kv = u64(f), u64(f)
        for _ in range(n_kv):
            f.seek(u64(f), 1)                   # the key
            skip_value(f, u32(f))
        types = set()
        for _ in range(n_tensors):
            f.seek(u64(f), 1)                   # the name
            n_dims = u32(f)
            dims = struct.unpack(f"<{n_dims}Q", f.read(8 * n_dims))
            kind = u32(f)
            f.seek(8, 1)                        # the data offset
            if sum(d > 1 for d in dims) >= 2:
                types.add(GGML_TYPES.get(kind, f"type {kind}"))
    return types
