"""`python -m apps` serves a tab for every modality that loads, and only those."""
from apps.__main__ import TABS


def test_apps_serves_exactly_the_modalities_that_load(open_app, app_server):
    log = app_server[1]
    page = open_app()
    shown = page.get_by_role("tab").all_inner_texts()
    left_out = {t.title for t in TABS if f"apps: no {t.title} tab:" in log.read_text()}
    assert "Text" in shown
    assert shown == [t.title for t in TABS if t.title not in left_out]
    assert "running at http://127.0.0.1:" in log.read_text()
