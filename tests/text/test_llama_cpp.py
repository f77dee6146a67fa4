"""The llama.cpp engine (suite.models.llama_cpp) on GGUF files of the embedded SmolLM2 at several types:
logits equal to the torch engine's on the same weights (F32), every lossless chain decoder's greedy tokens
equal to the engine's own `ar` (F32, Q8_0, Q4_K_M: the quantized types once crashed a native build),
rejected tails gone from llama.cpp's memory, a context grown on demand decoding as a large fixed one, tree
decoders refused, a missing package named with its fix."""
import sys

import pytest
import torch

import text

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (bash scripts/setup.sh)")

from suite.models.llama_cpp import LlamaCppLM  # noqa: E402
from text.gguf_quantize import embedded_gguf  # noqa: E402

PROMPTS = ["def fib(n):\n    if n < 2:\n        return n\n    return", "The capital of France is Paris. The capital of"]
LOSSLESS = ("jacobi", "sjd", "ngram", "sam_decoding", "suffix", "auto")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The embedded SmolLM2 requantized (once, into a temp cache) as F32, Q8_0 and Q4_K_M."""
    mp = pytest.MonkeyPatch()
    mp.setenv("PARASUITE_CACHE", str(tmp_path_factory.mktemp("cache")))
    try:
        yield {kind: embedded_gguf(kind) for kind in ("F32", "Q8_0", "Q4_K_M")}
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def engines(files):
    return {kind: text.load(path, engine="llama.cpp") for kind, path in files.items()}


def test_f32_logits_match_the_torch_engine_on_the_same_weights(engines, smol):
    ids = smol.rows(PROMPTS[1])[0]
    adapter = engines["F32"].model
    cache = adapter.new_cache(1)
    n = len(ids)
    got = adapter(torch.tensor([ids]), torch.arange(n)[None], cache, None)
    with torch.no_grad():
        want = smol.model(input_ids=torch.tensor([ids])).logits
    # llama.cpp keeps K/V in float16: logits agree to a few hundredths, the next token everywhere
    torch.testing.assert_close(got, want, atol=5e-2, rtol=1e-2)
    assert torch.equal(got.argmax(-1), want.argmax(-1))


@pytest.mark.parametrize("kind", ["F32", "Q8_0", "Q4_K_M"])
def test_lossless_decoders_equal_the_engines_own_ar(engines, kind):
    gen = engines[kind]
    for prompt in PROMPTS:
        ar = gen.generate(prompt, decoder="ar", max_new_tokens=20)
        assert len(ar.token_ids) > 0 and ar.text.strip()
        for name in LOSSLESS:
            assert gen.generate(prompt, decoder=name, max_new_tokens=20).token_ids == ar.token_ids, (kind, name)


def test_a_ragged_batch_equals_each_row_alone(engines):
    gen = engines["Q8_0"]
    alone = [gen.generate(p, decoder="ar", max_new_tokens=12).token_ids for p in PROMPTS]
    for name in ("ar", "ngram"):
        assert gen.generate(PROMPTS, decoder=name, max_new_tokens=12).token_ids == alone, name


def test_rejected_tails_leave_llama_cpp_memory(engines):
    adapter = engines["Q8_0"].model
    ids = engines["Q8_0"].rows(PROMPTS[0])[0]
    adapter_cache = adapter.new_cache(1)
    seq = adapter_cache.seqs[0]
    n = len(ids)
    adapter(torch.tensor([ids + [1, 2, 3]]), torch.arange(n + 3)[None], adapter_cache, None)
    mem = adapter.engine.memory
    assert llama_cpp.llama_memory_seq_pos_max(mem, seq) == n + 2  # a fresh row holds its own positions only
    adapter_cache.append(torch.arange(n + 3)[None], torch.ones(1, n + 3, dtype=torch.bool), dense=True)
    adapter_cache.drop_tail(3)                                     # a rejected draft of 3
    assert llama_cpp.llama_memory_seq_pos_max(mem, seq) == n - 1
    assert adapter_cache.filled == [n]


def test_the_context_grows_on_demand_to_the_tokens_of_a_large_fixed_one(engines, files):
    """The context starts at START_CTX: a short request leaves it there, a longer one grows it to the next power of
    two first and decodes the tokens of a context fixed at 2048; an explicit n_ctx stays fixed and refuses more."""
    from suite import generate
    from suite.models.llama_cpp import START_CTX
    prompt = torch.tensor([engines["Q8_0"].rows(" ".join([PROMPTS[1]] * 20))[0]])
    assert START_CTX < prompt.shape[1] + 64 <= 2 * START_CTX
    grown, fixed = LlamaCppLM(files["Q8_0"]), LlamaCppLM(files["Q8_0"], n_ctx=2048)
    short = generate(grown, prompt[:, :32], decoder="ar", max_new_tokens=16).new_tokens
    assert grown.engine.n_ctx == START_CTX and grown.config.max_length == grown.engine.max_ctx > 2048
    assert short == generate(fixed, prompt[:, :32], decoder="ar", max_new_tokens=16).new_tokens
    for name in ("ar", "ngram"):
        want = generate(fixed, prompt, decoder=name, max_new_tokens=64).new_tokens
        assert generate(grown, prompt, decoder=name, max_new_tokens=64).new_tokens == want, name
    assert grown.engine.n_ctx == 2 * START_CTX
    small = LlamaCppLM(files["Q8_0"], n_ctx=START_CTX)
    with pytest.raises(ValueError, match=f"context holds {START_CTX} tokens"):
        generate(small, prompt, decoder="ar", max_new_tokens=64)
    assert small.engine.n_ctx == START_CTX


def test_a_full_context_grows_with_its_rows_k_v_moved_over(files):
    """Forwards past the context without a checked request (rows of several requests): the decode that finds it
    full grows it, the cached rows' K/V copied over, and the logits equal a large fixed context's to the bit."""
    from suite.models.llama_cpp import START_CTX
    grown, fixed = LlamaCppLM(files["Q8_0"]), LlamaCppLM(files["Q8_0"], n_ctx=2048)
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(1000, 20000, (2, START_CTX), generator=gen)
    logits = []
    for adapter in (grown, fixed):
        cache, out = adapter.new_cache(2), []
        for part in (slice(0, 100), slice(100, 140), slice(140, 141)):     # 280 cells, then 282: over 256
            pos = torch.arange(part.start, part.stop)[None].expand(2, -1)
            out.append(adapter(tokens[:, part], pos, cache, None))
            cache.append(pos, torch.ones_like(pos, dtype=torch.bool), dense=True)
        logits.append(torch.cat(out, 1))
    assert grown.engine.n_ctx == 2 * START_CTX
    assert torch.equal(logits[0], logits[1])


def test_tree_decoders_are_refused_with_the_fix(engines):
    with pytest.raises(ValueError, match="custom_mask"):
        engines["Q8_0"].generate("hello", decoder="token_recycling", max_new_tokens=4)


def test_chat_uses_the_files_template_and_stops_at_im_end(engines):
    gen = engines["Q8_0"]
    assert gen.tokenizer.eos_token == "<|im_end|>"
    assert gen.eos_token_ids == frozenset({gen.tokenizer.convert_tokens_to_ids("<|im_end|>")})
    res = gen.generate("What is 2+2?", decoder="ar", chat=True, max_new_tokens=48)
    assert res.text.strip()


def test_missing_package_names_the_fix(files, monkeypatch):
    from suite.models import llama_cpp as engine
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(ImportError, match="scripts/setup.sh"):
        engine.LlamaCppLM(files["Q8_0"])


def test_engine_choice_is_checked(files, tmp_path):
    with pytest.raises(ValueError, match="unknown engine"):
        text.load(files["Q8_0"], engine="onnx")
    with pytest.raises(ValueError, match="GGUF"):
        text.load(tmp_path, engine="llama.cpp")
    assert isinstance(text.load(files["Q8_0"]).model, LlamaCppLM)    # the default where llama.cpp is installed


def test_exit_stops_the_stepping_thread_before_python_finalizes(files):
    """The hook registered for interpreter exit closes the scheduler (its thread joined) and then frees the
    llama.cpp context: a daemon thread killed inside native code aborted one CLI run in ten."""
    import weakref

    from suite.models import llama_cpp as engine_module
    from suite.scheduler import _close_at_exit
    gen = text.load(files["Q8_0"])
    gen.generate("hello", decoder="ar", max_new_tokens=4)
    engine = gen.scheduler.engine
    assert engine._thread is not None and engine._thread.is_alive()
    _close_at_exit(weakref.ref(engine))
    assert engine.closed and (engine._thread is None or not engine._thread.is_alive())
    engine_module._close_at_exit(weakref.ref(gen.model.engine))
    assert gen.model.engine.ctx is None


def test_the_tokenizer_reads_llama_cpps_vocabulary_as_transformers_does(engines, files):
    """The engine's tokenizer (text.llama_cpp_tokenizer: llama.cpp's vocabulary, no transformers tokenizer
    resident) gives transformers' ids, chat text and decoded text, except that llama.cpp's smollm pre-tokenizer
    splits digits first (as SmolLM2's own tokenizer.json): a newline run before a digit is one token there."""
    from text.llama_cpp_engine import gguf_tokenizer
    from text.llama_cpp_tokenizer import LlamaCppTokenizer
    from text.prompts import GROUPS
    tok = engines["Q8_0"].tokenizer
    assert isinstance(tok, LlamaCppTokenizer)
    ref = gguf_tokenizer(files["Q8_0"])
    assert (tok.eos_token_id, tok.pad_token_id, len(tok)) == (ref.eos_token_id, ref.pad_token_id, len(ref))
    texts = [p for group in GROUPS.values() for p, _ in group] + PROMPTS + ["héllo wörld — 日本語 🙂\t tabs"]
    for t in texts:
        chat = [{"role": "user", "content": t}]
        assert tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False) == \
            ref.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        ids = ref(t, add_special_tokens=False)["input_ids"]
        if not any(c.isdigit() for c in t):
            assert tok(t)["input_ids"] == ref(t)["input_ids"]
        for k in range(0, len(ids), 7):          # prefixes: a cut multi-byte character reads as U+FFFD in both
            assert tok.decode(ids[:k]) == ref.decode(ids[:k], skip_special_tokens=False)
    assert [ref.convert_ids_to_tokens(i) for i in tok("\n\n1.")["input_ids"]] == ["ĊĊ", "1", "."]
    assert tok.decode(tok("<|im_start|>user\nhi<|im_end|>")["input_ids"], skip_special_tokens=True) == "user\nhi"


def test_the_matrix_types_are_read_from_the_header_alone(files):
    from gguf import GGUFReader

    from suite.models.llama_cpp import gguf_matrix_types
    for path in files.values():
        want = {t.tensor_type.name for t in GGUFReader(str(path)).tensors if sum(d > 1 for d in t.shape) >= 2}
        assert gguf_matrix_types(path) == want


def test_structured_output_compiles_against_the_files_transformers_tokenizer(engines):
    gen = engines["Q8_0"]
    res = gen.generate("Is the sea salty? Answer yes or no.", chat=True, regex=r"(yes|no)", max_new_tokens=4)
    assert res.text in ("yes", "no")
