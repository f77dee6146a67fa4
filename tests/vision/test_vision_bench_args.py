"""Issue 40, finding 5: `python -m vision.bench` checks every decoder name (and its options) before
the model loads or any decoder runs."""
import pytest

import vision
import vision.bench


@pytest.mark.parametrize("specs, message", [(["ar", "zipar", "nope"], "unknown image decoder 'nope'"),
                                           (["ar", "zipar:windw=3"], "decoder 'zipar' does not take windw")])
def test_a_bad_decoder_exits_2_before_anything_runs(monkeypatch, capsys, specs, message):
    monkeypatch.setattr(vision, "load_image_pipeline", lambda *a, **k: pytest.fail("loaded the model first"))
    assert vision.bench.main(["--decoders", *specs]) == 2
    assert message in capsys.readouterr().err
