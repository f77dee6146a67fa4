"""The Grounding tab in a real browser: the example scene grounded by hybrid next to ar, the same
boxes and forward counts as the library, and a readable message for an empty query."""
import pytest


@pytest.fixture(scope="module")
def grd(require_tab):
    require_tab("Grounding")
    import vision
    return vision.load_grounding_pipeline()


def test_grounding_tab_grounds_like_the_library(open_app, require_tab, grd, screenshot):
    require_tab("Grounding")
    from apps.grounding import DEFAULT_DECODER, EXAMPLE_QUERY, example_scene
    from PIL import Image
    want = grd(Image.fromarray(example_scene()), EXAMPLE_QUERY, decoder=DEFAULT_DECODER)
    ar = grd(Image.fromarray(example_scene()), EXAMPLE_QUERY, decoder="ar")
    assert want.boxes                                                   # the example finds something

    page = open_app()
    page.get_by_role("tab", name="Grounding").click()
    page.locator("#grounding-run").click()
    row = page.locator(f"#grounding-stats tr[data-decoder='{DEFAULT_DECODER}'][data-state='done']")
    row.wait_for()
    stat = lambda r, key: r.locator(f"td[data-stat='{key}']").inner_text()   # noqa: E731
    assert int(stat(row, "forwards")) == want.stats.row_forwards
    ar_row = page.locator("#grounding-stats tr[data-decoder='ar'][data-state='done']")
    assert int(stat(ar_row, "forwards")) == ar.stats.row_forwards
    assert int(page.locator("#grounding-boxes .ps-boxes").get_attribute("data-count")) == len(want.boxes)
    assert page.locator("#grounding-boxes tr.ps-box").count() == len(want.boxes)
    floor = grd.model.cfg["hybrid_confidence_floor"]["aabb"]            # the model's default, shown and used
    assert f"confidence_floor={floor}" in page.locator("#grounding-options textarea, #grounding-options input").first.input_value()
    page.locator("#grounding-output img").wait_for()
    screenshot(page, "app-grounding.png")

    page = open_app()                                                   # bad input: a readable message
    page.get_by_role("tab", name="Grounding").click()
    page.locator("#grounding-query textarea, #grounding-query input").first.fill("   ")
    page.locator("#grounding-run").click()
    page.get_by_text("empty query: say what to find").first.wait_for()
    assert "Traceback" not in page.locator("body").inner_text()
