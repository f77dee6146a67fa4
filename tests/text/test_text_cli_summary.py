"""`python -m text`'s summary line says what the result is (the decoder's guarantee) and why an answer
stopped short: the prompt and the answer filled the model's context (the tiny model's is 96 tokens),
one prompt and in a batch."""
import json
import re

from text.__main__ import main

LONG = "word " * 70          # about 70 tokens of the tiny model's 96


def test_a_stop_at_the_context_limit_says_so(tiny, tiny_dir, capsys):
    assert main([LONG, "--model", str(tiny_dir), "--decoder", "ar", "--max-new-tokens", "64"]) == 0
    err = capsys.readouterr().err
    new = len(tiny.generate(LONG, decoder="ar", max_new_tokens=64).token_ids)
    assert 0 < new < 64
    assert f"stopped at the model's context limit after {new} of 64 new tokens" in err


def test_a_batch_marks_the_context_stop_per_prompt(tiny_dir, tmp_path, capsys):
    src, dst = tmp_path / "prompts.txt", tmp_path / "out.jsonl"
    src.write_text(f"Hello\n{LONG}\n")
    assert main(["--input", str(src), "--output", str(dst), "--model", str(tiny_dir), "--decoder", "ar",
                 "--max-new-tokens", "40"]) == 0
    reasons = [json.loads(line)["finish_reason"] for line in dst.read_text().splitlines()]
    assert reasons[1] == "context" and reasons[0] != "context"
    assert "prompt 2: stopped at the model's context limit" in capsys.readouterr().err


def test_the_summary_line_names_the_decoders_guarantee(tiny_dir, tmp_path, capsys):
    assert main(["Hello there", "--model", str(tiny_dir), "--decoder", "ngram", "--max-new-tokens", "4"]) == 0
    err = capsys.readouterr().err
    assert "tokens in" in err and "; ngram: lossless (exact when greedy, ar's distribution when sampling)" in err
    src = tmp_path / "prompts.txt"
    src.write_text("Hello\nWorld\n")
    assert main(["--input", str(src), "--model", str(tiny_dir), "--decoder", "jacobi", "--max-new-tokens", "3"]) == 0
    assert "2 prompts: " in (err := capsys.readouterr().err) and "; jacobi: exact (greedy output equals ar's" in err


def test_auto_says_which_decoders_it_ran(tiny_dir, capsys):
    """Issue 40, finding 9: `auto` names the decoders it used and their steps, on the summary line."""
    import re
    assert main(["Hello there", "--model", str(tiny_dir), "--decoder", "auto", "--max-new-tokens", "12"]) == 0
    line = capsys.readouterr().err.strip().splitlines()[-1]
    used = re.search(r"; auto ran ((?:\w+ \d+ steps?(?:, )?)+)", line)
    assert used, line
    steps = {m[0]: int(m[1]) for m in re.findall(r"(\w+) (\d+) steps?", used.group(1))}
    forwards = int(re.search(r"in (\d+) forwards", line).group(1))
    from suite.decoders.chain.auto import Auto
    assert steps and set(steps) <= set(Auto().candidates) and sum(steps.values()) <= forwards


def readme_text_examples() -> list[list[str]]:
    import shlex
    from pathlib import Path
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    return [shlex.split(line.split("#", 1)[0])[3:] for line in readme.splitlines()
            if line.startswith('python -m text "')]


def test_readme_text_examples_show_what_they_claim(tiny_dir, capsys):
    """Issue 40, finding 9: the README's `--decoder speculative --option draft=self:8` example claimed a
    speedup it did not give; every one-prompt example of a decoder other than ar now prints its measured
    speed against ar (--compare), and runs (here on the tiny model)."""
    examples = readme_text_examples()
    assert any("speculative" in ex for ex in examples)
    for ex in examples:
        decoder = ex[ex.index("--decoder") + 1] if "--decoder" in ex else "ar"
        if decoder == "ar" or "--model" in ex or "--image" in ex:
            continue
        assert "--compare" in ex, ex
        tiny = [re.sub(r"^draft=self:\d+$", "draft=self:1", a) for a in ex]        # the tiny model has 2 layers
        assert main(tiny + ["--model", str(tiny_dir), "--max-new-tokens", "6"]) == 0, ex
        assert re.search(r"\d\.\d\dx vs ar \(", capsys.readouterr().err), ex
