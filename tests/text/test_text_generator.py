"""TextGenerator on a tiny random Llama with SmolLM2's real tokenizer (fast, offline)."""
import subprocess
import sys
from pathlib import Path

import pytest

import suite
import text
from suite import Step
from text.generator import TextGenerator, TextStream


ROOT = Path(__file__).resolve().parents[2]
PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"
LOSSLESS = [("ar", {}), ("jacobi", {}), ("sjd", {}), ("mc_sjd", {}), ("lookahead", {}), ("ngram", {}),
            ("speculative", {"draft": "self:1"})]


def test_import_text_is_light():
    code = ("import sys, text; heavy = [m for m in ('torch', 'transformers') if m in sys.modules]; "
            "assert not heavy, heavy; assert callable(text.load) and text.TextGenerator")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_load_exposes_model_and_tokenizer(tiny):
    assert isinstance(tiny, TextGenerator)
    assert tiny.model.config.num_hidden_layers == 2 and not tiny.model.training
    assert tiny.tokenizer.padding_side == "left"
    assert tiny.max_length == 96  # conftest's tiny context


def test_str_prompt_gives_str(tiny):
    res = tiny.generate(PROMPT, max_new_tokens=6)
    assert isinstance(res.text, str)
    assert isinstance(res.token_ids, list) and all(isinstance(t, int) for t in res.token_ids)
    assert 1 <= len(res.token_ids) <= 6
    assert res.text == tiny.decode(res.token_ids)
    assert res.stats.num_new_tokens == len(res.token_ids)
    assert res.stats.num_forwards == len(res.token_ids)  # ar: one token per forward


def test_list_prompt_gives_list_and_matches_single_rows(tiny):
    prompts = ["Hi", PROMPT]  # ragged: the first row is left-padded
    batch = tiny.generate(prompts, max_new_tokens=6, decoder="ngram")
    assert isinstance(batch.text, list) and len(batch.text) == 2
    assert isinstance(batch.token_ids[0], list)
    for p, ids, t in zip(prompts, batch.token_ids, batch.text):
        single = tiny.generate(p, max_new_tokens=6)
        assert ids == single.token_ids and t == single.text


@pytest.mark.parametrize("decoder,options", LOSSLESS, ids=[d for d, _ in LOSSLESS])
def test_greedy_decoders_equal_ar(tiny, decoder, options):
    ref = tiny.generate(PROMPT, max_new_tokens=10)
    res = tiny.generate(PROMPT, decoder=decoder, max_new_tokens=10, **options)
    assert res.token_ids == ref.token_ids and res.text == ref.text


def test_sampling_is_reproducible_with_seed(tiny):
    a = tiny.generate(PROMPT, max_new_tokens=8, temperature=1.0, top_k=50, top_p=0.9, seed=3)
    b = tiny.generate(PROMPT, max_new_tokens=8, temperature=1.0, top_k=50, top_p=0.9, seed=3)
    assert a.token_ids == b.token_ids


def test_stream_chunks_join_to_generate_text(tiny):
    ref = tiny.generate(PROMPT, max_new_tokens=12, decoder="ngram")
    s = tiny.stream(PROMPT, max_new_tokens=12, decoder="ngram")
    chunks = list(s)
    assert "".join(chunks) == ref.text == s.text
    assert s.token_ids == ref.token_ids
    assert s.stats.num_new_tokens == len(ref.token_ids) and s.stats.num_forwards == ref.stats.num_forwards


class Replay:
    """A finished request whose steps are given (what TextStream reads of a scheduler's request)."""

    def __init__(self, steps):
        self._steps, self.stats, self.done = steps, suite.DecodeStats(), True

    def steps(self):
        return iter(self._steps)


def test_stream_waits_for_whole_multibyte_characters(tiny):
    word = "héllo 🙂 wörld"
    ids = tiny.tokenizer(word, add_special_tokens=False).input_ids
    assert len(ids) > len(word.split())  # the emoji spans several byte-level tokens
    steps = [Step(i, [[t]], 1, [False], suite.DecodeStats()) for i, t in enumerate(ids)]
    stream = TextStream(tiny, Replay(steps))
    chunks = list(stream)
    assert "".join(chunks) == word
    assert not any("\ufffd" in c for c in chunks)


def test_chat_applies_the_template(tiny):
    ids, mask = tiny.encode("Hello", chat=True)
    expected = tiny.tokenizer.apply_chat_template([{"role": "user", "content": "Hello"}],
                                                  add_generation_prompt=True, tokenize=False)
    assert tiny.tokenizer.decode(ids[0]) == expected
    assert expected.endswith("<|im_start|>assistant\n")
    res = tiny.generate("Hello", chat=True, max_new_tokens=4)
    assert len(res.token_ids) >= 1


def test_eos_ends_generation_and_is_left_out_of_text(tiny, tiny_dir):
    free = tiny.generate(PROMPT, max_new_tokens=8).token_ids
    stop = free[2]
    gen = text.load(tiny_dir)
    gen.model.generation_config.eos_token_id = stop
    gen = TextGenerator(gen.model, gen.tokenizer)
    res = gen.generate(PROMPT, max_new_tokens=8)
    cut = free[:free.index(stop) + 1]
    assert res.token_ids == cut and res.finish_reason == "eos"
    assert res.text == tiny.tokenizer.decode(cut[:-1])
    assert tiny.generate(PROMPT, max_new_tokens=3).finish_reason == "length"


@pytest.mark.parametrize("prompt", ["", [], ["fine", ""], None, 3])
def test_bad_prompts_raise_value_error(tiny, prompt):
    with pytest.raises(ValueError, match="prompt"):
        tiny.generate(prompt)


def test_prompt_longer_than_context_raises(tiny):
    with pytest.raises(ValueError, match="context"):
        tiny.generate("word " * (tiny.max_length + 10))


def test_stream_checks_input_before_iterating(tiny):
    with pytest.raises(ValueError, match="empty prompt"):
        tiny.stream("")
    with pytest.raises(ValueError, match="unknown decoder"):
        tiny.stream("Hi", decoder="nope")
    with pytest.raises(ValueError):
        tiny.stream(["a", "b"])


def test_unknown_decoder_and_option_raise(tiny):
    with pytest.raises(ValueError, match="unknown decoder 'nope'"):
        tiny.generate("Hi", decoder="nope")
    with pytest.raises(ValueError, match="does not take"):
        tiny.generate("Hi", decoder="ngram", window=3)
    with pytest.raises(ValueError, match="max_new_tokens"):
        tiny.generate("Hi", max_new_tokens=0)


def test_missing_path_raises(tmp_path):
    with pytest.raises(ValueError, match="no model folder"):
        text.load(tmp_path / "does-not-exist")
    with pytest.raises(ValueError, match="config.json"):
        text.load(tmp_path)


def test_folder_without_tokenizer_raises(tiny_dir, tmp_path):
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        (tmp_path / name).write_bytes((tiny_dir / name).read_bytes())
    with pytest.raises(ValueError, match="no tokenizer.*save_pretrained"):
        text.load(tmp_path)
