"""`python -m document`'s summary line says what the reading is: the decoder's guarantee, and for a
lossy one its measured CER cost (document/quality.json)."""
import pytest

from document.__main__ import main


def test_summary_line_names_a_lossy_decoders_measured_cost(tmp_path, capsys):
    from apps.document import example_page
    page = example_page()
    if page is None:
        pytest.skip("scikit-image's page.png is not installed")
    assert main([page, "--out", str(tmp_path / "out"), "--decoder", "block_diffusion", "--detector",
                 "projection"]) == 0
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("document: 1 done")
    assert "; block_diffusion: lossy: CER 1.24% (real PDF lines 4.71%) against ar's 0.96%" in line
