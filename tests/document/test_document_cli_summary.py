"""`python -m document`'s summary line says what the reading is: the decoder's guarantee, and for a
lossy one its measured CER cost (document/quality.json)."""
import pytest

from document.__main__ import main


@pytest.mark.parametrize("flags, quoted", [([], True), (["--threshold", "0.9"], False)])
def test_summary_line_names_a_lossy_decoders_measured_cost(tmp_path, capsys, monkeypatch, flags, quoted):
    """Issue 40, finding 8: the CLI runs block_diffusion with the registry's defaults (the settings the
    bench measured and quality.json quotes), and quotes that cost only for the settings that ran."""
    import suite
    from apps.document import example_page
    from suite.registry import DEFAULTS
    page = example_page()
    if page is None:
        pytest.skip("scikit-image's page.png is not installed")
    built, make = [], suite.make_decoder
    monkeypatch.setattr(suite, "make_decoder", lambda name, **o: built.append((name, o)) or make(name, **o))
    assert main([page, "--out", str(tmp_path / "out"), "--decoder", "block_diffusion", "--detector",
                 "projection", *flags]) == 0
    ran = {**DEFAULTS["document"]["block_diffusion"], **({"threshold": 0.9} if flags else {})}
    assert built[0] == ("block_diffusion", {"threshold": 0.9} if flags else {})   # the CLI checks what was typed
    assert len(built) > 1 and all(b == ("block_diffusion", ran) for b in built[1:])   # the reader runs the defaults
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("document: 1 done")
    cost = "; block_diffusion: lossy: CER 1.24% (real PDF lines 4.71%) against ar's 0.96%"
    assert (cost in line) == quoted, line
    if not quoted:
        assert line.endswith("block_diffusion: lossy (its output may differ from ar's); its quality cost was measured "
                             "at block_size=8, threshold=0.95, prefix_only=True, not at the settings that ran"), line


def test_one_defaults_table_feeds_the_api_the_app_and_the_bench():
    import apps.document
    import document.bench
    import document.ocr
    from apps.summary import summary_html
    from suite.registry import DEFAULTS, effective_options
    table = DEFAULTS["document"]
    assert document.ocr.DECODER_DEFAULTS is table                              # document.read / load_ocr()(...)
    for name in table:                                                        # the app's options box
        shown = apps.document.parse_options(name, apps.document.default_options(name))
        assert effective_options(name, "document", shown) == effective_options(name, "document")
    assert ("block_diffusion", table["block_diffusion"]) in [(d, o) for label, d, o in document.bench.RULES
                                                            if "(default" in label]
    row = [{"decoder": "block_diffusion", "tokens": 4, "forwards": 2, "tokens_per_forward": 2.0, "wall_time_s": 0.1,
            "tokens_per_second": 40.0, "done": True}]
    ran = summary_html(row, "document", "block_diffusion", options=effective_options("block_diffusion", "document"))
    other = summary_html(row, "document", "block_diffusion",
                         options=effective_options("block_diffusion", "document", {"threshold": 0.9}))
    assert "CER 1.24%" in ran and "ps-quality-elsewhere" not in ran
    assert "CER 1.24%" not in other and "measured at block_size=8, threshold=0.95, prefix_only=True" in other
