"""The Document tab in a real browser: a page read into boxed lines by a decoder raced against ar,
the same text as the library, what the result is (its guarantee, measured CER, whether its text is
ar's, why it is slower), an error that clears the earlier result without showing server paths, and
three users at once."""
import pytest

from apps.document import UI_DEFAULTS, example_page


@pytest.fixture(scope="module")
def ocr(require_tab):
    require_tab("Document")
    import document
    return document.load_ocr()


def upload(page, path: str):
    """Upload `path` into the Document tab's file box and wait until the box lists it. The box shows a
    name as two spans (stem, extension), so it is found by its accessible name, not by its text: waiting
    for the text "name.png" timed out after uploads that had succeeded (CI, 2026-12-06)."""
    box = page.locator("#document-file")
    if not box.locator("input[type=file]").count():     # the example page is shown (maybe not rendered yet)
        clear = box.get_by_role("button", name="Clear")
        clear.wait_for()
        clear.click()                                    # drop the example, upload the file
    box.locator("input[type=file]").set_input_files(path)
    box.get_by_label(path.rsplit("/", 1)[-1], exact=True).wait_for(timeout=60_000)


def read_like_the_app(ocr, path: str, decoder: str) -> str:
    from document.reader import read
    return "\n\n".join(p.text for p in read(path, ocr=ocr, decoder=decoder, **UI_DEFAULTS.get(decoder, {})))


def test_document_tab_reads_a_page_like_the_library(open_app, ocr, screenshot, checks, tmp_path):
    page_file = example_page()
    assert page_file, "scikit-image's page.png is the example page (scikit-image is in requirements)"
    from document.reader import read
    want = read(page_file, ocr=ocr, decoder="block_diffusion", **UI_DEFAULTS["block_diffusion"])

    page = checks.open_tab(open_app, "Document")
    upload(page, page_file)
    checks.pick(page, "document-decoder", "block_diffusion")
    page.locator("#document-compare input[type=checkbox]").check()
    page.get_by_role("button", name="Read").click()
    page.locator("#document-stats tr[data-decoder='block_diffusion'][data-state='done']").wait_for()
    page.locator("#document-stats tr[data-decoder='ar'][data-state='done']").wait_for()

    assert page.locator("#document-text textarea").input_value() == "\n\n".join(p.text for p in want)
    assert page.locator("#document-lines tr.ps-line").count() == sum(len(p.lines) for p in want)
    assert page.locator("#document-pages img").count() >= 1            # the page with its lines boxed
    cells = page.locator("#document-stats tr[data-decoder='block_diffusion'] td[data-stat='tokens']")
    assert int(cells.inner_text()) == sum(p.stats.num_new_tokens for p in want if p.stats)
    checks.says_what_it_is(page, "document", "block_diffusion", compared=True)
    assert "CER 1.24%" in page.locator("#document-stats .ps-quality").inner_text()
    screenshot(page, "app-document.png")

    broken = tmp_path / "broken.png"                                    # then a file that is no image
    broken.write_text("not an image")
    upload(page, str(broken))
    page.get_by_role("button", name="Read").click()
    checks.readable_error(page, "broken.png: not an image or PDF file")   # its name, not the server's path
    checks.cleared(page, "document", ["#document-text textarea", "#document-lines tr.ps-line", "#document-pages img"])

    page = checks.open_tab(open_app, "Document")                                  # nothing to read: a readable message
    page.locator("#document-file").get_by_role("button", name="Clear").click()
    page.get_by_role("button", name="Read").click()
    checks.readable_error(page, "no file: upload a page image (PNG, JPEG, TIFF) or a PDF")


def test_document_tab_three_users_at_once_get_their_own_text(open_app, ocr, tmp_path, checks):
    from PIL import Image
    scan = Image.open(example_page())
    files = []
    for k, (top, bottom) in enumerate(((0, 70), (60, 130), (120, scan.height))):    # three parts of the scan
        path = tmp_path / f"part{k}.png"
        scan.crop((0, top, scan.width, bottom)).save(path)
        files.append(str(path))
    pages = []
    for path in files:
        page = checks.open_tab(open_app, "Document")
        upload(page, path)
        pages.append(page)
    for page in pages:
        page.get_by_role("button", name="Read").click()
    texts = []
    for page, path in zip(pages, files):
        page.locator("#document-stats tr[data-decoder='ar'][data-state='done']").wait_for()
        texts.append(page.locator("#document-text textarea").input_value())
        assert texts[-1] == read_like_the_app(ocr, path, "ar")
    assert len(set(texts)) == 3
