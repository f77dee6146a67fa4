"""bench --real's scoring (document.bench_real): truth from the text layer inside each output box."""
from document.bench_real import RealPage, Score, fold


def page() -> RealPage:
    chars = [(c, 10 + 10 * i, 20) for i, c in enumerate("\ufb01ne \u201cwords\u201d")]
    chars += [("\r", 200, 20), ("\n", 200, 20)] + [(c, 10 + 10 * i, 60) for i, c in enumerate("next line")]
    return RealPage("p", None, chars)


def test_fold_writes_typography_as_ascii():
    assert fold("\ufb01ne \u201cwords\u201d \u2014  x\u2026") == 'fine "words" - x...'


def test_score_counts_edits_words_and_flags():
    s = Score()
    s.add(page(), [((0, 10, 200, 30), 'fine "words"', 0.9, False),
                   ((0, 50, 200, 70), "nest line", 0.2, True)], cpu_s=1.5)
    row = s.row("ours")
    assert row["CER"] == f"{100 * 1 / 21:.2f}%"                  # one edit in 12 + 9 reference characters
    assert row["words"] == f"{100 * 3 / 4:.1f}%"                 # 'nest' is not a word of the page
    assert row["wrong lines"] == 1 and row["flag recall"] == "100%" and row["flag precision"] == "100%"
    assert row["CPU s/page"] == "1.50"


def test_a_missed_line_costs_words_not_cer():
    s = Score()
    s.add(page(), [((0, 10, 200, 30), 'fine "words"', 0.9, None)], cpu_s=1.0)
    row = s.row("engine")
    assert row["CER"] == "0.00%" and row["words"] == "50.0%" and "flag recall" not in row
