"""The `auto` decoder on our OCR model: it picks a lossless decoder per request and reads as `ar`
does, from the Python API and from `python -m document --decoder auto`. Run as users run it: with
the cost curve measured (PARASUITE_COST on, which the suite's conftest turns off), in a temporary
cache folder."""
import pytest
from PIL import Image, ImageDraw

from document import data


@pytest.fixture
def users_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("PARASUITE_COST", "1")
    monkeypatch.setenv("PARASUITE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_auto_reads_lines_as_ar_does(ocr, users_cache):
    lines = data.heldout_set(12)
    images = [s.image for s in lines]
    ar, auto = ocr(images, decoder="ar"), ocr(images, decoder="auto")
    assert auto.tokens == ar.tokens
    assert any(k.startswith("auto:") for k in auto.stats.events)        # it chose among its candidates


def test_cli_reads_a_page_with_auto(tmp_path, users_cache, capsys):
    from document.__main__ import main
    page = Image.new("RGB", (900, 160), "white")
    ImageDraw.Draw(page).text((30, 50), "Hello there 2026", font=data._font(data.font_paths()[0], 32), fill="black")
    page.save(tmp_path / "page.png")
    out = tmp_path / "out"
    code = main([str(tmp_path / "page.png"), "--out", str(out), "--decoder", "auto"])
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    assert "FAILED" not in printed.out
    assert (out / "page.png.txt").read_text().strip() == "Hello there 2026"
