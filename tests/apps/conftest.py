"""Fixtures for the browser tests: `python -m apps` on a free local port, Debian's Chromium driven
by Playwright (no browser download: executable_path points at the system browser)."""
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from suite.runtime.storage import atomic_path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("PARASUITE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
START_TIMEOUT_S = 600      # a fresh machine converts the embedded model first (~30 s, more when the CPU is busy)
RESULT_TIMEOUT_MS = 180_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_serving(proc: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"python -m apps exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"python -m apps did not serve {url} within {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def app_server(tmp_path_factory):
    """(url, log path) of `python -m apps` serving every available tab; stopped after the session."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    log = tmp_path_factory.mktemp("apps") / "server.log"
    models = tmp_path_factory.mktemp("served-models")      # the models root: the Model folder fields show
    (models / "empty-model").mkdir()
    # its own file cache: Gradio copies served files (examples, outputs) into GRADIO_TEMP_DIR under fixed
    # names, and a test process copying the same file there while this server streams it once broke a page
    # ("Too much data for declared Content-Length")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", GRADIO_ANALYTICS_ENABLED="False",
               PYTHONUNBUFFERED="1", GRADIO_TEMP_DIR=str(tmp_path_factory.mktemp("gradio")))
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "apps", "--port", str(port), "--models-dir", str(models)],
                                cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until_serving(proc, url, log)
        yield url, log, models
    finally:   # stop it as a person does: Ctrl-C; it must close cleanly
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail("python -m apps did not stop on Ctrl-C (SIGINT) within 60 s")
        if code != 0:
            pytest.fail(f"python -m apps exited with {code} on Ctrl-C:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def app_url(app_server):
    return app_server[0]


@pytest.fixture(scope="session")
def require_tab(app_server):
    """require_tab("Image"): skip, with the server's own reason, when that modality did not load."""
    def check(title: str):
        for line in app_server[1].read_text().splitlines():
            if line.startswith(f"apps: no {title} tab:"):
                pytest.skip(line)
    return check


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: install the Debian package (apt-get install chromium, "
                    "listed in requirements/apt-apps.txt) or set PARASUITE_CHROMIUM")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def open_app(browser, app_url):
    """open_app() -> a fresh page (own browser context, like another user) showing the app."""
    contexts = []

    def open_page():
        ctx = browser.new_context(viewport={"width": 1360, "height": 1000})
        contexts.append(ctx)
        page = ctx.new_page()
        page.set_default_timeout(RESULT_TIMEOUT_MS)
        page.goto(app_url)
        page.get_by_role("tab").first.wait_for()
        # the page's load events (the Document and Grounding tabs' examples) answered: a late answer re-renders
        # the page and empties a field typed into before it (seen after the Document and Grounding tests)
        page.wait_for_load_state("networkidle")
        return page

    yield open_page
    for ctx in contexts:
        ctx.close()


@pytest.fixture(scope="session")
def smol():
    """The embedded generator in the test process: the oracle for what the app must show."""
    import text
    return text.load(progress=False)


@pytest.fixture(scope="session")
def screenshot_dir(tmp_path_factory) -> Path:
    """Where the tests' screenshots go: $PARASUITE_SCREENSHOTS (`PARASUITE_SCREENSHOTS=docs make test`
    refreshes the README's docs/app-*.png), else a temporary folder: a test run leaves the
    tracked tree alone."""
    folder = os.environ.get("PARASUITE_SCREENSHOTS")
    return Path(folder) if folder else tmp_path_factory.mktemp("screenshots")


@pytest.fixture
def screenshot(screenshot_dir):
    """screenshot(page, name) -> the full-page screenshot written whole to screenshot_dir / name."""
    def save(page, name: str) -> Path:
        screenshot_dir.mkdir(parents=True, exist_ok=True)
        with atomic_path(screenshot_dir / name) as tmp:
            page.screenshot(path=str(tmp), full_page=True)
        return screenshot_dir / name
    return save



# -- what every tab's result must say (see apps/summary.summary_html) ---------------------------------

def guarantee_of(decoder: str) -> str:
    import suite
    from apps.speech import OWN
    if decoder in OWN:
        return OWN[decoder].kind
    return "reference" if decoder == "ar" else suite.decoder_entry(decoder).guarantee


def expect_result_says_what_it_is(page, prefix: str, decoder: str, compared: bool) -> None:
    """#<prefix>-stats names the decoder's guarantee (with a measured quality cost when lossy), each
    row's guarantee, whether the output equals ar's when compared, and why a slower decoder is slower."""
    stats = page.locator(f"#{prefix}-stats")
    kind = guarantee_of(decoder)
    marker = stats.locator(f".ps-guarantee[data-decoder='{decoder}']")
    assert marker.get_attribute("data-guarantee") == kind
    assert (stats.locator(".ps-quality").count() == 1) == (kind == "lossy" and decoder in quality_figures(prefix)), \
        marker.inner_text()
    rows = stats.locator("tbody tr")
    for i in range(rows.count()):
        name = rows.nth(i).get_attribute("data-decoder")
        want = guarantee_of(name) if name != "ar" else "reference"
        assert rows.nth(i).locator("td[data-stat='guarantee']").inner_text() == want
    assert stats.locator(".ps-same").count() == (1 if compared else 0)
    if not compared:
        return
    assert stats.locator("tbody tr").first.get_attribute("data-decoder") == "ar"      # the baseline first
    speedup = float(stats.locator(f"tr[data-decoder='{decoder}'] td[data-stat='speedup']").inner_text().rstrip("x"))
    speed = stats.locator(".ps-speed")
    if speedup < 1.0:
        assert speed.count() == 1, f"{decoder} ran at {speedup:.2f}x ar with no word of why"
        assert "drafts cost cost(N) on this machine" in speed.inner_text()
        assert speed.inner_text().endswith(f"= {speedup:.2f}x.")
    else:
        assert speed.count() == 0


def quality_figures(prefix: str) -> dict:
    from apps.summary import quality_costs
    return quality_costs({"speech-asr": "asr"}.get(prefix, prefix))


def expect_cleared(page, prefix: str, outputs: list[str]) -> None:
    """After an error, no earlier result stays on screen: no stats, and each output empty."""
    page.wait_for_function(f"() => !document.querySelector('#{prefix}-stats tr')")
    for sel in outputs:
        loc = page.locator(sel)
        if sel.endswith("textarea"):
            page.wait_for_function("s => document.querySelector(s).value === ''", arg=sel)
        else:
            page.wait_for_function("s => document.querySelectorAll(s).length === 0", arg=sel)
        assert loc.count() == 0 or sel.endswith("textarea")


def expect_readable_error(page, message: str) -> None:
    page.get_by_text(message, exact=False).locator("visible=true").first.wait_for()   # not a hidden copy
    body = page.locator("body").inner_text()
    assert "Traceback" not in body and 'File "' not in body and "/tmp/gradio" not in body


def open_tab(open_app, title: str):
    """A fresh page (another user) on tab `title`."""
    page = open_app()
    page.get_by_role("tab", name=title).click()
    return page


def pick(page, element: str, name: str) -> None:
    """Choose `name` in the dropdown #element."""
    page.locator(f"#{element} input").click()
    page.get_by_role("option", name=name, exact=True).click()


def stat(page, prefix: str, decoder: str, key: str) -> str:
    """One cell of #<prefix>-stats: decoder's row, column `key`."""
    return page.locator(f"#{prefix}-stats tr[data-decoder='{decoder}'] td[data-stat='{key}']").inner_text()


@pytest.fixture(scope="session")
def checks():
    """What every tab's test shares: checks.says_what_it_is, .cleared, .readable_error, and the
    moves open_tab, pick and stat."""
    from types import SimpleNamespace
    return SimpleNamespace(says_what_it_is=expect_result_says_what_it_is, cleared=expect_cleared,
                           readable_error=expect_readable_error, open_tab=open_tab, pick=pick, stat=stat)
