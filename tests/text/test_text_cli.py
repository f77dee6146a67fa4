"""`python -m text` on the tiny model (in process) and its exit codes (one subprocess)."""
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from suite import parse_option
from text.__main__ import main
from text.generator import TextGenerator


ROOT = Path(__file__).resolve().parents[2]


def test_single_prompt_prints_text_and_stats(tiny, tiny_dir, capsys):
    assert main(["Hello there", "--model", str(tiny_dir), "--decoder", "ngram", "--max-new-tokens", "5"]) == 0
    out, err = capsys.readouterr()
    assert out == tiny.generate("Hello there", max_new_tokens=5).text + "\n"
    assert "tokens in" in err and "forwards" in err


def test_stream_flag_prints_the_same_text(tiny, tiny_dir, capsys):
    assert main(["Hello there", "--model", str(tiny_dir), "--stream", "--max-new-tokens", "5"]) == 0
    out, _ = capsys.readouterr()
    assert out == tiny.generate("Hello there", max_new_tokens=5).text + "\n"


def test_batch_file_to_jsonl(tiny, tiny_dir, tmp_path, capsys):
    prompts = ["Hello there", "The quick brown fox", "One two three"]
    src = tmp_path / "prompts.txt"
    src.write_text("\n".join(prompts[:2]) + "\n\n" + prompts[2] + "\n")   # blank lines are skipped
    dst = tmp_path / "out.jsonl"
    argv = ["--input", str(src), "--output", str(dst), "--model", str(tiny_dir), "--decoder", "lookahead",
            "--max-new-tokens", "4", "--chat", "--option", "window=3", "level=3"]
    assert main(argv) == 0
    records = [json.loads(line) for line in dst.read_text().splitlines()]
    assert [r["prompt"] for r in records] == prompts
    for r in records:
        assert r["decoder"] == "lookahead"
        assert r["text"] == tiny.generate(r["prompt"], max_new_tokens=4, chat=True).text
        assert r["stats"]["num_new_tokens"] == len(r["token_ids"]) and r["stats"]["num_forwards"] >= 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl", "out.jsonl.manifest.jsonl", "prompts.txt"]
    manifest = [json.loads(line) for line in (tmp_path / "out.jsonl.manifest.jsonl").read_text().splitlines()]
    assert [m["status"] for m in manifest] == ["ok"] * 3
    err = capsys.readouterr().err
    assert "3 prompts" in err and "3 done, 0 skipped, 0 failed" in err


def test_stdin_input_to_stdout(tiny_dir, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("Hello\nWorld\n"))
    assert main(["--input", "-", "--model", str(tiny_dir), "--max-new-tokens", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["prompt"] for line in lines] == ["Hello", "World"]


def test_options_are_typed():
    assert parse_option("num_draft=6") == ("num_draft", 6)
    assert parse_option("adaptive=false") == ("adaptive", False)
    assert parse_option("draft=self:8") == ("draft", "self:8")
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_option("oops")


@pytest.mark.parametrize("argv,message", [
    (["Hi", "--model", "/no/such/model"], "no model folder"),
    (["", "--model", "{tiny}"], "empty prompt"),
    (["Hi", "--model", "{tiny}", "--option", "bogus=1"], "does not take 'bogus'"),
    (["Hi", "--model", "{tiny}", "--option", "novalue"], "is not key=value"),
    (["--input", "/no/such/file.txt", "--model", "{tiny}"], "no prompt file"),
    (["Hi", "--model", "{tiny}", "--max-new-tokens", "0"], "max-new-tokens"),
    (["Hi", "--model", "{tiny}", "--output", "/no/such/dir/out.jsonl"], "does not exist"),
])
def test_errors_exit_2_with_one_line(tiny_dir, capsys, argv, message):
    argv = [a.replace("{tiny}", str(tiny_dir)) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_a_too_long_prompt_is_an_error_row_and_the_batch_goes_on(tiny, tiny_dir, tmp_path, capsys):
    src = tmp_path / "prompts.txt"
    src.write_text("Hello\n" + "word " * (tiny.max_length + 10) + "\n")
    dst = tmp_path / "out.jsonl"
    assert main(["--input", str(src), "--output", str(dst), "--model", str(tiny_dir), "--decoder", "ar",
                 "--max-new-tokens", "2"]) == 1                      # 1: an input of the batch failed
    err = capsys.readouterr().err
    assert "error: prompt 2: " in err and "context" in err and "Traceback" not in err
    assert [json.loads(line)["prompt"] for line in dst.read_text().splitlines()] == ["Hello"]
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl.manifest.jsonl").read_text().splitlines()]
    assert [r["status"] for r in rows] == ["ok", "error"] and "context" in rows[1]["message"]


def test_a_failure_midway_keeps_the_rest_and_a_rerun_resumes(tiny_dir, tmp_path, monkeypatch, capsys):
    real = TextGenerator.generate
    calls = []

    def flaky(self, prompt, **kw):
        calls.append(prompt)
        if len(calls) == 2:
            raise ValueError("simulated failure")
        return real(self, prompt, **kw)

    monkeypatch.setattr(TextGenerator, "generate", flaky)
    src = tmp_path / "prompts.txt"
    src.write_text("one\ntwo\nthree\n")
    dst = tmp_path / "out.jsonl"
    argv = ["--input", str(src), "--output", str(dst), "--model", str(tiny_dir), "--decoder", "ar", "--max-new-tokens", "2"]
    assert main(argv) == 1
    assert "error: prompt 2: simulated failure" in capsys.readouterr().err
    assert [json.loads(line)["prompt"] for line in dst.read_text().splitlines()] == ["one", "three"]
    assert main(argv) == 0                                           # only the failed prompt runs again
    assert calls == ["one", "two", "three", "two"]
    assert [json.loads(line)["prompt"] for line in dst.read_text().splitlines()] == ["one", "two", "three"]
    assert "2 skipped" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl", "out.jsonl.manifest.jsonl", "prompts.txt"]


@pytest.mark.parametrize("decoder,option,message", [
    ("jacobi", "window=abc", "option window must be an integer, got 'abc'"),
    ("lookahead", "level=x", "option level must be an integer"),
    ("ngram", "bogus=1", "does not take 'bogus'"),
])
def test_bad_decoder_options_are_one_line_errors(tiny_dir, capsys, decoder, option, message):
    assert main(["Hi", "--model", str(tiny_dir), "--decoder", decoder, "--option", option]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {message}\n" or (err.startswith("error: ") and message in err and err.count("\n") == 1)


def test_the_command_line_takes_the_operators_options(tiny, tiny_dir, tmp_path, capsys):
    """The command line's user runs the process: an operator's option (suffix's global tree on disk) is
    theirs to set there, which a served request may not (tests/apps/test_serve.py)."""
    tree = tmp_path / "tree.json"
    assert main(["Hello there", "--model", str(tiny_dir), "--decoder", "suffix", "--max-new-tokens", "5",
                 "--option", f"global_file={tree}", "global_tokens=5000"]) == 0
    assert capsys.readouterr().out == tiny.generate("Hello there", max_new_tokens=5).text + "\n"
    assert tree.is_file() and json.loads(tree.read_text())


def test_a_prompt_after_option_is_the_prompt_and_a_bad_option_is_named(tiny_dir, capsys):
    from text.__main__ import parse_args
    args = parse_args(["--decoder", "jacobi", "--option", "window=3", "Hello there"])
    assert args.prompt == "Hello there" and args.option == ["window=3"]
    assert main(["--model", str(tiny_dir), "--option", "bogus=1", "hi"]) == 2
    err = capsys.readouterr().err
    assert "does not take 'bogus'" in err and "give either" not in err and err.count("\n") == 1
    assert main(["--model", str(tiny_dir), "--decoder", "jacobi", "--option", "window=3", "hi", "there"]) == 2
    assert "'hi' is not key=value" in capsys.readouterr().err


def test_whitespace_prompt_is_refused(capsys):
    assert main(["   ", "--decoder", "ar"]) == 2
    assert "empty prompt" in capsys.readouterr().err


def test_compare_prints_the_speedup_over_ar(tiny_dir, capsys):
    assert main(["Hello there", "--model", str(tiny_dir), "--decoder", "jacobi", "--max-new-tokens", "5",
                 "--compare"]) == 0
    err = capsys.readouterr().err
    assert "x vs ar (" in err and "same text as ar" in err           # jacobi is exact under greedy


def test_unknown_decoder_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["Hi", "--decoder", "nope"])
    assert e.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_subprocess_help_and_exit_code(tiny_dir, tmp_path):
    run = subprocess.run([sys.executable, "-m", "text", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0 and "examples:" in run.stdout and "ngram" in run.stdout
    dst = tmp_path / "out.jsonl"
    run = subprocess.run([sys.executable, "-m", "text", " ", "--model", str(tiny_dir), "--output", str(dst)],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.startswith("error: ") and "Traceback" not in run.stderr
    assert not dst.exists()


def test_a_rerun_of_a_finished_job_skips_every_prompt_and_leaves_the_output(tiny_dir, tmp_path, monkeypatch, capsys):
    src = tmp_path / "prompts.txt"
    src.write_text("one\ntwo\none\n")                                  # a prompt given twice keeps both rows
    dst = tmp_path / "out.jsonl"
    argv = ["--input", str(src), "--output", str(dst), "--model", str(tiny_dir), "--decoder", "ar", "--max-new-tokens", "2"]
    assert main(argv) == 0
    before = dst.read_bytes(), dst.stat().st_mtime_ns
    capsys.readouterr()
    real, calls = TextGenerator.generate, []
    monkeypatch.setattr(TextGenerator, "generate", lambda self, prompt, **kw: calls.append(prompt) or real(self, prompt, **kw))
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert calls == [] and "0 done, 3 skipped, 0 failed" in err
    assert "3 done by an earlier run (skipped): none decoded in this run" in err and "tok/s" not in err
    assert (dst.read_bytes(), dst.stat().st_mtime_ns) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl", "out.jsonl.manifest.jsonl", "prompts.txt"]
    src.write_text("one\ntwo\none\nthree\n")                           # a prompt added: only it runs
    assert main(argv) == 0
    assert calls == ["three"]
    records = [json.loads(line) for line in dst.read_text().splitlines()]
    assert [r["prompt"] for r in records] == ["one", "two", "one", "three"]
    assert f"{len(records[-1]['token_ids'])} tokens decoded in this run" in capsys.readouterr().err    # three's only


def test_text_cut_inside_a_multibyte_character_ends_before_it(tiny):
    ids = tiny.tokenizer("a\U0001d49c", add_special_tokens=False).input_ids   # a 4-byte character, in byte tokens
    cut = next(k for k in range(1, len(ids)) if tiny.tokenizer.decode(ids[:k]).endswith("\ufffd"))
    assert tiny.decode(ids[:cut]) == "a" and tiny.decode(ids) == "a\U0001d49c"
