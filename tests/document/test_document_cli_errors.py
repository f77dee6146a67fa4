"""`python -m document` (in process) meets a user's mistakes as one line and exit status 2 before any
file is read: a decoder of another modality, block flags out of range."""
import pytest

from document.__main__ import main


@pytest.fixture
def page(tmp_path, monkeypatch):
    """A page path; reading any file (or loading the OCR) fails the test: these errors come first."""
    import document.ocr
    monkeypatch.setattr(document.ocr, "load_ocr", lambda *a, **k: pytest.fail("loaded the OCR model"))
    path = tmp_path / "page.png"
    path.write_bytes(b"not read")
    return path


@pytest.mark.parametrize("flags, message", [
    (["--decoder", "zipar"], "unknown decoder 'zipar' for documents; choose one of: ar, "),
    (["--decoder", "delay"], "unknown decoder 'delay' for documents"),
    (["--decoder", "block_diffusion", "--block-size", "0"], "--block-size must be >= 1, got 0"),
    (["--decoder", "block_diffusion", "--threshold", "7"], "--threshold is a confidence in (0, 1], got 7.0"),
    (["--decoder", "block_diffusion", "--threshold", "0"], "--threshold is a confidence in (0, 1], got 0.0"),
])
def test_bad_decoder_flags_exit_2_before_any_file(page, tmp_path, capsys, flags, message):
    assert main([str(page), "--out", str(tmp_path / "out"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()
