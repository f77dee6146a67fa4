"""Calibrated line confidence (document.confidence) and the CLI's "check these" list."""
from types import SimpleNamespace

import numpy as np

from document import confidence
from document.__main__ import check_list


def test_fit_orders_lines_by_their_least_probable_token():
    rng = np.random.default_rng(0)
    low = rng.uniform(0.05, 1.0, 400)
    right = rng.uniform(0, 1, 400) < low                # the surer the least sure token, the likelier right
    x = np.array([confidence.features(0.99, p, None) for p in low])
    w, b = confidence.fit(x, right.astype(float))
    cal = {"weights": w.tolist(), "bias": b, "check_below": 0.5}
    probs = [confidence.probability(cal, 0.99, p, None) for p in (0.1, 0.5, 0.95)]
    assert probs == sorted(probs) and probs[0] < 0.3 and probs[-1] > 0.7


def test_ctc_disagreement_lowers_the_confidence_once_fitted():
    x = np.array([confidence.features(0.98, 0.9, agree) for agree in [True] * 50 + [False] * 50])
    right = np.r_[np.ones(45), np.zeros(5), np.ones(15), np.zeros(35)]
    w, b = confidence.fit(x, right)
    cal = {"weights": w.tolist(), "bias": b, "check_below": 0.5}
    assert confidence.probability(cal, 0.98, 0.9, False) < confidence.probability(cal, 0.98, 0.9, True)


def test_flag_threshold_keeps_the_precision():
    rng = np.random.default_rng(1)
    prob = rng.uniform(0, 1, 300)
    wrong = rng.uniform(0, 1, 300) > prob
    t = confidence.flag_threshold(prob, wrong, precision=0.8)
    recall, precision = confidence.flag_scores(prob, wrong, t)
    assert precision >= 0.8 and recall > 0


def test_without_calibration_the_confidence_is_the_mean_probability():
    assert confidence.probability(None, 0.93, 0.2, False) == 0.93
    assert confidence.check_below(None) == confidence.DEFAULT_CHECK_BELOW


def test_check_list_names_the_least_confident_lines_first():
    ok = SimpleNamespace(status="ok", item=SimpleNamespace(key="a.pdf"),
                         result={"check": [(1, 3, 0.4, "maximunn"), (2, 1, 0.1, "typcs")]})
    text = check_list([ok, SimpleNamespace(status="error", item=SimpleNamespace(key="b.pdf"), result=None)])
    lines = text.splitlines()
    assert lines[0].startswith("check these (2 lines")
    assert "a.pdf p.2 line 1 (0.10): typcs" in lines[1] and "p.1 line 3" in lines[2]
    assert check_list([]) == ""


def test_the_shipped_weights_flag_their_least_sure_lines(ocr):
    from tests.document.test_document_page_lines import two_column_page
    from document.reader import read_page
    assert ocr.calibration is not None and 0 < ocr.calibration["check_below"] < 1
    page = read_page(two_column_page(), 0, ocr, "ar", "auto")
    assert len(page.lines) == len(page.signals) == 6
    for line, (mean, low, agree) in zip(page.lines, page.signals):
        assert 0 <= low <= 1 and 0 <= mean <= 1 and agree in (True, False)
        assert line.check == (confidence.probability(ocr.calibration, mean, low, agree) < ocr.calibration["check_below"])
