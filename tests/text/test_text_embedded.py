"""The embedded SmolLM2-135M-Instruct, offline (session-scoped; a few short generations)."""
import subprocess
import sys
from pathlib import Path

import pytest

import text

ROOT = Path(__file__).resolve().parents[2]
FRANCE = "What is the capital of France?"
CODE = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"

pytestmark = pytest.mark.slow


def test_eos_is_im_end_everywhere(smol):
    eos = smol.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert smol.tokenizer.eos_token == smol.tokenizer.pad_token == "<|im_end|>"
    assert smol.model.config.eos_token_id == smol.model.generation_config.eos_token_id == eos
    assert smol.model.generation_config.pad_token_id == eos
    assert next(smol.model.parameters()).dtype.is_floating_point and not smol.model.training
    assert str(next(smol.model.parameters()).dtype) == "torch.float32"


def test_capital_of_france(smol):
    res = smol.generate(FRANCE, chat=True, decoder="ar", max_new_tokens=24)
    assert "Paris" in res.text
    assert res.finish_reason == "eos" and "<|im_end|>" not in res.text


@pytest.mark.parametrize("decoder", ["ngram", "lookahead"])
def test_parallel_decoders_give_the_ar_tokens(smol, decoder):
    ref = smol.generate(CODE, decoder="ar", max_new_tokens=32)
    res = smol.generate(CODE, decoder=decoder, max_new_tokens=32)
    assert res.token_ids == ref.token_ids
    assert res.stats.num_forwards <= ref.stats.num_forwards


def test_stream_joins_to_generate(smol):
    ref = smol.generate(FRANCE, chat=True, decoder="ngram", max_new_tokens=24)
    chunks = list(smol.stream(FRANCE, chat=True, decoder="ngram", max_new_tokens=24))
    assert len(chunks) > 1 and "".join(chunks) == ref.text


def test_batch_of_two(smol):
    res = smol.generate([FRANCE, "Name a colour."], chat=True, max_new_tokens=16)
    assert isinstance(res.text, list) and len(res.text) == 2
    assert "Paris" in res.text[0] and res.text[1].strip()
    assert res.token_ids[0] == smol.generate(FRANCE, chat=True, max_new_tokens=16).token_ids


def test_errors(smol, tmp_path):
    with pytest.raises(ValueError, match="empty prompt"):
        smol.generate("")
    with pytest.raises(ValueError, match="unknown decoder"):
        smol.generate("Hi", decoder="medusa")
    with pytest.raises(ValueError, match="no model folder"):
        text.load(tmp_path / "missing")
    (tmp_path / "config.json").write_text(smol.model.config.to_json_string())
    with pytest.raises(ValueError, match="no tokenizer"):
        text.load(tmp_path)


def test_cli_on_the_embedded_model(tmp_path):
    run = subprocess.run([sys.executable, "-m", "text", FRANCE, "--chat", "--decoder", "ngram",
                          "--max-new-tokens", "16"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "Paris" in run.stdout and "forwards" in run.stderr
    src, dst = tmp_path / "prompts.txt", tmp_path / "out.jsonl"
    src.write_text(FRANCE + "\n")
    run = subprocess.run([sys.executable, "-m", "text", "--input", str(src), "--output", str(dst),
                          "--option", "bogus=1"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 2 and run.stderr.startswith("error: ") and "Traceback" not in run.stderr
    assert not dst.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["prompts.txt"]


PASSAGE = ("The old lighthouse stood at the edge of the cliff for two hundred years. Every night its keeper "
           "climbed the spiral stairs, trimmed the wick and watched the ships pass safely through the strait. ")


def test_repetitive_text_takes_at_most_half_the_forwards_with_ngram(smol):
    """Issue 2's bar: a prompt that repeats a long passage decodes with `ngram` in at most half
    the forwards of `ar`, with identical tokens."""
    prompt = PASSAGE * 3 + PASSAGE.split(" watched")[0]
    ref = smol.generate(prompt, decoder="ar", max_new_tokens=48)
    res = smol.generate(prompt, decoder="ngram", max_new_tokens=48)
    assert res.token_ids == ref.token_ids
    assert res.stats.num_forwards * 2 <= ref.stats.num_forwards
