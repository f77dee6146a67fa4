"""The speech CLIs say what each result is (its decoder's guarantee, and for a lossy one the measured
quality cost from speech/quality.json), and run the default their app tab runs."""
import json

import speech.asr
from speech.tts import DEFAULT_DECODER, main, tts_guarantee


def test_tts_summary_line_runs_the_default_and_names_its_guarantee(tmp_path, capsys):
    import apps.speech
    assert main(["Hello there.", "--out", str(tmp_path / "a.wav")]) == 0
    line = capsys.readouterr().out.strip()
    assert DEFAULT_DECODER == apps.speech.DEFAULT_TTS == "delay"
    assert line.startswith(f"{tmp_path / 'a.wav'}: ") and line.endswith("; " + tts_guarantee("delay"))
    assert tts_guarantee("delay").startswith("delay: exact")
    assert tts_guarantee("parallel").startswith("parallel: lossy: CER of our recogniser on the speech 0.196")
    assert tts_guarantee("flat") == "flat: the baseline (ar on the flat model)"


def test_asr_rows_name_the_decoder_and_its_guarantee(monkeypatch):
    monkeypatch.setattr(speech.asr, "load_asr", lambda *a, **k: object())     # a recogniser of no family
    assert speech.asr.ASRWorker().decoder == speech.asr.DEFAULT_DECODER == "ctc_speculative"
    assert speech.asr.ASRWorker(decoder="ar").guarantee == "ar: the baseline"
    ctc = speech.asr.ASRWorker(decoder="ctc").guarantee
    assert ctc.startswith("ctc: lossy: CER 0.213 against ar's 0.345")       # the CTC head: no registry decoder
    assert speech.asr.ASRWorker(decoder="ctc_speculative").guarantee.startswith("ctc_speculative: lossy: CER 0.216")


def test_asr_json_row_carries_the_guarantee(tmp_path, capsys):
    import numpy as np
    import soundfile as sf
    from speech.data import synthesize
    sf.write(tmp_path / "a.wav", synthesize("Return a list.", "flite:slt").astype(np.float32), 16000)
    assert speech.asr.main([str(tmp_path / "a.wav"), "--json", "--decoder", "ctc"]) == 0
    row = json.loads(capsys.readouterr().out.strip())
    assert row["decoder"] == "ctc" and row["guarantee"].startswith("ctc: lossy")
    # issue 40, finding 10: a reading without a forward has no tokens-per-forward figure (not 45.0 beside 0)
    assert row["num_forwards"] == 0 and row["num_new_tokens"] > 0 and row["tokens_per_forward"] is None


def test_asr_help_and_docstring_take_the_guarantee_from_the_registry(capsys):
    """Issue 40, finding 9: `speech.asr --help` once called ctc_speculative lossless; the registry says lossy."""
    import re

    import pytest

    import suite
    with pytest.raises(SystemExit):
        speech.asr.main(["--help"])
    text = " ".join((capsys.readouterr().out + speech.asr.__doc__).split())
    assert suite.guarantee("ctc_speculative") == "lossy"
    assert "ctc_speculative: lossy: CER 0.216 against ar's 0.345" in text
    for sentence in re.split(r"(?<=[.;)])\s", text):          # no sentence calls a lossy reader lossless
        if "ctc_speculative" in sentence or "default" in sentence:
            assert "lossless" not in sentence, sentence
