"""The Grounding tab in a real browser: hybrid raced against ar on the example scene, the same boxes
and forward counts as the library, what the result is (lossy, its measured Acc@0.5, whether its boxes
are ar's), the oriented mode with its own rotated example, an error that clears the earlier result,
and three users at once."""
import pytest


@pytest.fixture(scope="module")
def grd(require_tab):
    require_tab("Grounding")
    import vision
    return vision.load_grounding_pipeline()


def query_box(page):
    return page.locator("#grounding-query textarea, #grounding-query input").first


def test_grounding_tab_races_hybrid_against_ar_like_the_library(open_app, grd, screenshot, checks):
    from apps.grounding import EXAMPLE_QUERY, example_scene
    from PIL import Image
    want = grd(Image.fromarray(example_scene()), EXAMPLE_QUERY, decoder="hybrid")
    ar = grd(Image.fromarray(example_scene()), EXAMPLE_QUERY, decoder="ar")
    assert want.boxes                                                   # the example finds something

    page = checks.open_tab(open_app, "Grounding")
    checks.pick(page, "grounding-decoder", "hybrid")
    floor = grd.model.cfg["hybrid_confidence_floor"]["aabb"]            # the model's default, shown and used
    page.wait_for_function("f => document.querySelector('#grounding-options textarea, #grounding-options input')"
                           ".value.includes(f)", arg=f"confidence_floor={floor}")
    page.locator("#grounding-compare input[type=checkbox]").check()
    page.locator("#grounding-run").click()
    page.locator("#grounding-stats tr[data-decoder='hybrid'][data-state='done']").wait_for()
    assert int(checks.stat(page, "grounding", "hybrid", "forwards")) == want.stats.row_forwards
    assert int(checks.stat(page, "grounding", "ar", "forwards")) == ar.stats.row_forwards
    assert int(page.locator("#grounding-boxes .ps-boxes").get_attribute("data-count")) == len(want.boxes)
    assert page.locator("#grounding-boxes tr.ps-box").count() == len(want.boxes)
    checks.says_what_it_is(page, "grounding", "hybrid", compared=True)
    same = page.locator("#grounding-stats .ps-same").get_attribute("data-same")
    assert same == str(list(want.tokens) == list(ar.tokens)).lower()
    assert "Acc@0.5 81.1%" in page.locator("#grounding-stats .ps-quality").inner_text()
    page.locator("#grounding-output img").wait_for()
    screenshot(page, "app-grounding.png")

    query_box(page).fill("   ")                                        # then bad input: only spaces
    page.locator("#grounding-run").click()
    checks.readable_error(page, "empty query: say what to find")
    checks.cleared(page, "grounding", ["#grounding-output img", "#grounding-boxes .ps-boxes"])


def test_grounding_tab_oriented_mode_grounds_its_own_rotated_example(open_app, grd, checks):
    from apps.grounding import example
    image, query = example("obb")
    want = grd(image, query, decoder="ar", task="obb")
    page = checks.open_tab(open_app, "Grounding")
    page.get_by_label("oriented").check()
    page.wait_for_function("q => document.querySelector('#grounding-query textarea, #grounding-query input')"
                           ".value === q", arg=query)                   # the example follows the mode
    page.locator("#grounding-run").click()
    page.locator("#grounding-stats tr[data-decoder='ar'][data-state='done']").wait_for()
    assert int(checks.stat(page, "grounding", "ar", "forwards")) == want.stats.row_forwards
    assert page.locator("#grounding-boxes tr.ps-box").count() == len(want.boxes) > 0
    assert "angle (deg)" in page.locator("#grounding-boxes").inner_text()
    checks.says_what_it_is(page, "grounding", "ar", compared=False)


def test_grounding_tab_three_users_at_once_get_their_own_boxes(open_app, grd, checks):
    from apps.grounding import example_scene
    from PIL import Image
    jobs = [("the ring left of the blue square", "ar"), ("the blue square", "parallel_box"),
            ("the ring", "hybrid")]
    pages = []
    for query, decoder in jobs:
        page = checks.open_tab(open_app, "Grounding")
        query_box(page).fill(query)
        checks.pick(page, "grounding-decoder", decoder)
        pages.append(page)
    for page in pages:
        page.locator("#grounding-run").click()
    for page, (query, decoder) in zip(pages, jobs):
        page.locator(f"#grounding-stats tr[data-decoder='{decoder}'][data-state='done']").wait_for()
        want = grd(Image.fromarray(example_scene()), query, decoder=decoder)
        assert page.locator("#grounding-boxes p").first.inner_text().startswith(f"{query}: ")
        assert page.locator("#grounding-boxes tr.ps-box").count() == len(want.boxes)
        assert int(checks.stat(page, "grounding", decoder, "forwards")) == want.stats.row_forwards
