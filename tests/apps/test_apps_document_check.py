"""The Document tab lists the lines to check (calibrated confidence below the flag threshold), as the CLI does."""
from types import SimpleNamespace

from apps.document import lines_html


def test_the_tab_lists_the_flagged_lines_least_confident_first():
    line = lambda text, conf, check: SimpleNamespace(text=text, confidence=conf, check=check, box=(0, 0, 1, 1))  # noqa: E731
    pages = [SimpleNamespace(index=0, lines=[line("fine", 0.99, False), line("maximunn", 0.4, True)]),
             SimpleNamespace(index=1, lines=[line("typcs <b>", 0.1, True)])]
    out = lines_html(SimpleNamespace(pages=pages, decoder="ar", done=True))
    listed = out[out.index("Check these"):out.index("</ul>")]
    assert "2 lines below the confidence threshold" in listed
    assert listed.index("p.2 line 1 (0.10)") < listed.index("p.1 line 2 (0.40)")
    assert "typcs &lt;b&gt;" in listed and "fine" not in listed
    assert out.count("ps-check-line") == 2 and out.count("<tr class='ps-line") == 3


def test_no_flagged_line_no_list():
    page = SimpleNamespace(index=0, lines=[SimpleNamespace(text="ok", confidence=0.99, check=False, box=(0, 0, 1, 1))])
    assert "Check these" not in lines_html(SimpleNamespace(pages=[page], decoder="ar", done=True))
