"""The Document tab in a real browser: a page read into boxed lines, the same text as the library."""
from pathlib import Path

import pytest

from apps.document import UI_DEFAULTS, example_page


@pytest.fixture(scope="module")
def ocr():
    import document
    return document.load_ocr()


def test_document_tab_reads_a_page_like_the_library(open_app, require_tab, ocr, screenshot):
    require_tab("Document")
    page_file = example_page()
    assert page_file, "scikit-image's page.png is the example page (scikit-image is in requirements)"
    from document.reader import read
    want = read(page_file, ocr=ocr, decoder="block_diffusion", **UI_DEFAULTS["block_diffusion"])

    page = open_app()
    page.get_by_role("tab", name="Document").click()
    upload = page.locator("#document-file")
    upload.get_by_role("button", name="Clear").click()                  # drop the example, upload the file
    upload.locator("input[type=file]").set_input_files(page_file)
    upload.get_by_text("page.png").wait_for()
    page.locator("#document-compare input[type=checkbox]").check()
    page.get_by_role("button", name="Read").click()
    page.locator("#document-stats tr[data-decoder='block_diffusion'][data-state='done']").wait_for()
    page.locator("#document-stats tr[data-decoder='ar'][data-state='done']").wait_for()

    assert page.locator("#document-text textarea").input_value() == "\n\n".join(p.text for p in want)
    assert page.locator("#document-lines tr.ps-line").count() == sum(len(p.lines) for p in want)
    assert page.locator("#document-pages img").count() >= 1            # the page with its lines boxed
    cells = page.locator("#document-stats tr[data-decoder='block_diffusion'] td[data-stat='tokens']")
    assert int(cells.inner_text()) == sum(p.stats.num_new_tokens for p in want if p.stats)
    assert Path(screenshot(page, "app-document.png")).is_file()

    page = open_app()                                                   # nothing to read: a readable message
    page.get_by_role("tab", name="Document").click()
    page.locator("#document-file").get_by_role("button", name="Clear").click()
    page.get_by_role("button", name="Read").click()
    page.get_by_text("no file: upload a page image (PNG, JPEG, TIFF) or a PDF").first.wait_for()
    assert "Traceback" not in page.locator("body").inner_text()
