"""Stop strings and detokenisation in one place (text.row_text): generate, stream and `python -m text --stop`
end a row's text before its first stop string and stop decoding there; the OpenAI server uses the same rows."""
import pytest

from text.__main__ import main
from text.row_text import RowText, check_stops

EOS = 0


def decode(ids):
    """A toy tokenizer: id i is the character chr(96 + i); 99 is half of a two-token character."""
    return "".join("\ufffd" if i == 99 else chr(96 + i) for i in ids)


def test_a_row_ends_before_its_stop_string_and_holds_back_what_may_begin_one():
    row = RowText(decode, {EOS}, ["cd"])
    assert row.add([1, 2], done=False) == "ab"
    assert row.add([3], done=False) == ""            # "c" may begin "cd": held back
    assert row.add([5], done=False) == "ce"          # it did not
    assert row.add([3, 4, 6], done=False) == "" and row.finish == "stop" and row.text == "abce"
    assert row.add([7], done=True) == "" and row.ids == [1, 2, 3, 5, 3, 4, 6]


def test_a_row_without_stops_ends_by_eos_or_length_and_waits_for_whole_characters():
    row = RowText(decode, {EOS}, [])
    assert row.add([1, 99], done=False) == ""        # ends inside a character
    assert row.add([2, EOS], done=True) == "a\ufffdb`" and row.finish == "eos"
    short = RowText(decode, {EOS}, ["zz"])
    assert short.add([1, 26], done=False) == "a" and short.end() == "z" and short.finish == "length"


@pytest.mark.parametrize("stop", ["", ["a"] * 5, 3])
def test_bad_stops_name_the_fix(stop):
    with pytest.raises(ValueError, match="non-empty string or a list of up to 4"):
        check_stops(stop)


def _a_stop(text: str) -> str:
    """Three characters from the middle of `text` whose first occurrence is there."""
    for i in range(len(text) // 3, len(text) - 3):
        stop = text[i:i + 3]
        if stop.strip() and text.find(stop) == i:
            return stop
    raise AssertionError(f"no usable stop string in {text!r}")


def test_generate_and_stream_stop_at_the_stop_string_and_decode_no_further(tiny, tiny_dir, capsys):
    whole = tiny.generate("Hello there", decoder="ar", max_new_tokens=32)
    stop = _a_stop(whole.text)
    cut = tiny.generate("Hello there", decoder="ar", max_new_tokens=32, stop=stop)
    assert cut.text == whole.text[:whole.text.find(stop)] and cut.finish_reason == "stop"
    assert cut.stats.num_new_tokens < whole.stats.num_new_tokens          # decoding stopped there
    assert cut.token_ids == whole.token_ids[:len(cut.token_ids)]
    stream = tiny.stream("Hello there", decoder="ngram", max_new_tokens=32, stop=[stop, "never said"])
    assert "".join(stream) == cut.text and stream.finish_reason == "stop"
    batch = tiny.generate(["Hello there", "Hello there"], decoder="ar", max_new_tokens=32, stop=stop)
    assert batch.text == [cut.text] * 2 and batch.finish_reason == ["stop"] * 2
    assert main(["Hello there", "--model", str(tiny_dir), "--decoder", "ar", "--max-new-tokens", "32",
                 "--stop", stop]) == 0
    assert capsys.readouterr().out == cut.text + "\n"
