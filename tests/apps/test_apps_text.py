"""The Text tab in a real browser: used like a person would (type, pick, click, wait), its text
checked against the library, its stats against the tokens shown, errors as readable messages,
and three users at once each getting their own answer."""
import re

import pytest
from playwright.sync_api import expect

from apps.text import default_options

PRIME_PROMPT = "List the first ten prime numbers."
TOKENS = 20


class TextTab:
    """The Text tab of one browser page."""

    def __init__(self, page):
        self.page = page
        page.get_by_role("tab", name="Text").click()
        self.root = page.locator("#tab-text")

    def type_prompt(self, prompt: str):
        self.page.get_by_label("Prompt").fill(prompt)

    def pick_decoder(self, name: str):
        self.page.get_by_label("Decoder", exact=True).click()
        self.page.get_by_role("option", name=name, exact=True).click()
        # the app fills in the decoder's options; wait for it before typing over them
        expect(self.page.get_by_label("Decoder options")).to_have_value(default_options(name))

    def set_max_new_tokens(self, n: int):
        box = self.page.locator("#text-max-new-tokens input[type=number]")
        box.fill(str(n))
        box.press("Enter")

    def set_options(self, text: str):
        self.page.get_by_label("Decoder options").fill(text)

    def options(self) -> str:
        return self.page.get_by_label("Decoder options").input_value()

    def compare_with_ar(self, on: bool = True):
        self.page.get_by_label("Compare with AR").set_checked(on)

    def generate(self):
        self.page.get_by_role("button", name="Generate").click()

    def wait_done(self, decoder: str):
        self.page.locator(f"#text-stats tr[data-decoder='{decoder}'][data-state='done']").wait_for()

    def output(self, baseline: bool = False) -> str:
        return self.page.locator("#text-ar-output textarea" if baseline else "#text-output textarea").input_value()

    def stats(self, decoder: str) -> dict[str, str]:
        row = self.page.locator(f"#text-stats tr[data-decoder='{decoder}']")
        cells = row.locator("td[data-stat]")
        return {cells.nth(i).get_attribute("data-stat"): cells.nth(i).inner_text() for i in range(cells.count())}

    def chunk_tokens(self, baseline: bool = False) -> list[int]:
        spans = self.page.locator(("#text-ar-chunks" if baseline else "#text-chunks") + " .ps-chunk")
        return [int(spans.nth(i).get_attribute("data-tokens")) for i in range(spans.count())]

    def note(self) -> str:
        return self.page.locator("#text-stats .ps-note").inner_text()


def expected(smol, prompt: str, tokens: int = TOKENS):
    return smol.generate(prompt, decoder="ar", max_new_tokens=tokens, chat=True)


def test_text_tab_compares_a_decoder_with_ar(open_app, smol, screenshot, checks):
    want = expected(smol, PRIME_PROMPT)
    tab = TextTab(open_app())
    tab.type_prompt(PRIME_PROMPT)
    tab.pick_decoder("ngram")
    tab.set_max_new_tokens(TOKENS)
    tab.compare_with_ar()
    tab.generate()
    # results stream: ar's chunks show up (the 'running' state alone could be missed when the shared
    # scheduler finishes ar between two polls: it timed out once in a full run on a loaded machine)
    tab.page.locator("#text-ar-chunks .ps-chunks .ps-chunk").first.wait_for()
    tab.wait_done("ngram")
    tab.wait_done("ar")

    assert tab.output() == want.text            # greedy ngram is lossless: the library's ar text
    assert tab.output(baseline=True) == want.text
    assert tab.page.locator("#text-stats .ps-same").get_attribute("data-same") == "true"
    checks.says_what_it_is(tab.page, "text", "ngram", compared=True)     # in distribution; a slower run says why
    n = len(want.token_ids)
    ar, ng = tab.stats("ar"), tab.stats("ngram")
    assert int(ar["tokens"]) == int(ng["tokens"]) == n
    assert int(ar["forwards"]) == n             # ar: one token per forward, prefill included
    assert 1 <= int(ng["forwards"]) <= n
    assert float(ng["tokens_per_forward"]) == pytest.approx(n / int(ng["forwards"]), abs=0.01)
    assert float(ng["wall_time_s"]) > 0 and float(ar["tokens_per_second"]) > 0
    assert ar["speedup"] == "1.00x" and re.fullmatch(r"\d+\.\d\dx", ng["speedup"])
    # the picture: one span per forward that added text, their token counts add up to the stats
    assert sum(tab.chunk_tokens()) == n and len(tab.chunk_tokens()) <= int(ng["forwards"])
    assert tab.chunk_tokens(baseline=True) == [1] * len(tab.chunk_tokens(baseline=True))
    screenshot(tab.page, "app-text.png")


def test_text_tab_speculative_runs_with_a_self_draft(open_app, smol):
    prompt = "Write a haiku about parallel computing."
    want = expected(smol, prompt, 16)
    tab = TextTab(open_app())
    tab.type_prompt(prompt)
    decoder = "speculative"
    tab.pick_decoder(decoder)
    assert "draft=self:8" in tab.options()      # the app's default: the first 8 layers draft
    tab.set_max_new_tokens(16)
    tab.generate()
    tab.wait_done(decoder)
    assert tab.output() == want.text
    assert int(tab.stats(decoder)["tokens"]) == len(want.token_ids)
    assert sum(tab.chunk_tokens()) == len(want.token_ids)


def wait_for_error(page, message: str):
    """The error shows as a readable toast with the message, no traceback."""
    toast = page.get_by_text(message, exact=False).first
    toast.wait_for()
    body = page.locator("body").inner_text()
    assert "Traceback" not in body and 'File "' not in body


def test_text_tab_bad_input_shows_a_readable_error_and_keeps_serving(open_app, smol, checks):
    page = open_app()
    tab = TextTab(page)
    tab.type_prompt(PRIME_PROMPT)
    tab.pick_decoder("ar")
    tab.set_max_new_tokens(4)
    tab.generate()
    tab.wait_done("ar")
    assert tab.output()
    tab.type_prompt("   ")                           # only spaces: refused, and the earlier answer goes
    tab.generate()
    wait_for_error(page, "empty prompt: type some text into the prompt box")
    checks.cleared(page, "text", ["#text-output textarea", "#text-chunks .ps-chunk"])

    tab.type_prompt(PRIME_PROMPT)
    tab.pick_decoder("jacobi")
    tab.set_options("window=lots")
    tab.generate()
    wait_for_error(page, "option window must be an integer, got 'lots'")

    tab.pick_decoder("speculative")
    tab.set_options("draft=self:99")             # the library's own ValueError, passed through
    tab.generate()
    wait_for_error(page, "draft='self:99' needs 1 <= N < 30")

    tab.pick_decoder("ar")
    tab.set_max_new_tokens(8)
    tab.generate()
    tab.wait_done("ar")
    assert tab.output() == expected(smol, PRIME_PROMPT, 8).text


def test_text_tab_three_users_at_once_get_their_own_answers(open_app, smol):
    jobs = [("What is the capital of France? Answer in one sentence.", "lookahead"),
            ("List the first ten prime numbers.", "jacobi"),
            ("Name three colours of the rainbow.", "ar")]
    tabs = []
    for prompt, decoder in jobs:
        tab = TextTab(open_app())
        tab.type_prompt(prompt)
        tab.pick_decoder(decoder)
        tab.set_max_new_tokens(16)
        tabs.append(tab)
    for tab in tabs:                              # all three submitted before any finishes
        tab.generate()
    for tab, (prompt, decoder) in zip(tabs, jobs):
        tab.wait_done(decoder)
        want = expected(smol, prompt, 16)
        assert tab.output() == want.text, prompt
        assert int(tab.stats(decoder)["tokens"]) == len(want.token_ids)
    assert len({tab.output() for tab in tabs}) == 3
