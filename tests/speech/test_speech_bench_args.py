"""Issue 40, finding 5: `python -m speech.bench` checks its arguments before any model loads or any
data is built, builds only the held-out split it needs, and a split built in pieces resumes where an
interrupted build stopped (the same file as an uninterrupted one)."""
import numpy as np
import pytest

import speech
import speech.bench
import speech.data


def refuse(*_args, **_kwargs):
    pytest.fail("the bench loaded a model or built data before checking its arguments")


@pytest.mark.parametrize("argv, message", [
    (["--tts-decoders", "delay", "nope"], "--tts-decoders: unknown nope; choose from flat, "),
    (["--tts", "0", "--tts-decoders", "delay"], "--tts-decoders with --tts 0"),
    (["--asr", "-1"], "--tts and --asr count sentences"),
])
def test_bad_arguments_exit_2_before_anything_is_built(monkeypatch, capsys, argv, message):
    for name in ("load_asr", "load_tts"):
        monkeypatch.setattr(speech, name, refuse)
    monkeypatch.setattr(speech.data, "build", refuse)
    monkeypatch.setattr(speech.data, "load_split", refuse)
    assert speech.bench.main(argv) == 2
    assert message in capsys.readouterr().err


def test_the_bench_asks_for_the_held_out_split_only(monkeypatch, tmp_path):
    monkeypatch.setenv("PARASUITE_CACHE", str(tmp_path))
    built = []
    monkeypatch.setattr(speech.data, "build", lambda **kw: built.append(kw["splits"]) or
                        speech.data.save_split(speech.data.cache_dir() / "heldout.npz", [np.zeros(4)], ["a"], ["v"],
                                               ["p"]))
    assert [it["text"] for it in speech.data.load_split("heldout")] == ["a"]
    assert built == [("heldout",)]                       # not the 6,000-utterance training split


def test_an_interrupted_build_resumes_and_gives_the_same_file(monkeypatch, tmp_path):
    jobs = [(f"sentence {i}", "voice", 160, {}) for i in range(7)]
    made = []

    def utterance(job):
        made.append(job[0])
        if job[0] == "sentence 5" and stop:
            raise KeyboardInterrupt
        return np.full(3, int(job[0].split()[1]) / 10, dtype=np.float32), job[0], job[1], "p"
    monkeypatch.setattr(speech.data, "_utterance", utterance)
    monkeypatch.setattr(speech.data, "CHUNK", 2)
    whole = tmp_path / "whole" / "split.npz"
    whole.parent.mkdir()
    stop = False
    speech.data.build_resumable(whole, jobs)
    path = tmp_path / "split.npz"
    stop, made[:] = True, []
    with pytest.raises(KeyboardInterrupt):
        speech.data.build_resumable(path, jobs)
    assert not path.exists() and made == [f"sentence {i}" for i in range(6)]
    stop, made[:] = False, []
    speech.data.build_resumable(path, jobs)
    assert made == ["sentence 4", "sentence 5", "sentence 6"]           # the two saved pieces are kept
    with np.load(path) as got, np.load(whole) as want:
        assert all(np.array_equal(got[k], want[k]) for k in ("pcm", "lengths", "texts", "voices", "phonemes"))
    assert not (tmp_path / ".partial" / "split").exists()
