"""The Speech tab in a real browser: text spoken by a codebook-parallel decoder (player, waveform and
codebook grid shown, and what the recogniser heard), and a recording uploaded and transcribed."""
import shutil
import subprocess

import pytest

TEXT = "Return a list of cookies."


@pytest.fixture(scope="module")
def speech_pipes(require_tab):
    require_tab("Speech")
    from apps.speech import load_pipeline
    return load_pipeline()


def require_section(app_server, name: str):
    for line in app_server[1].read_text().splitlines():
        if line.startswith(f"apps: Speech tab without {name}:"):
            pytest.skip(line)


def test_speech_tab_speaks_like_the_library(open_app, app_server, speech_pipes, screenshot):
    require_section(app_server, "TTS")
    want = speech_pipes.tts(TEXT, decoder="parallel", temperature=0.7, seed=0)

    page = open_app()
    page.get_by_role("tab", name="Speech").click()
    page.locator("#speech-text textarea").fill(TEXT)
    page.locator("#speech-run").click()
    row = page.locator("#speech-stats tr[data-decoder='parallel'][data-state='done']")
    row.wait_for()
    assert int(row.locator("td[data-stat='forwards']").inner_text()) == want.stats.num_forwards
    assert int(row.locator("td[data-stat='tokens']").inner_text()) == want.codes.numel()   # codes, Q x T
    page.locator("#speech-audio audio[src]").first.wait_for(state="attached")   # the player, loaded
    page.locator("#speech-wave img").wait_for()
    page.locator("#speech-grid img").wait_for()                         # codebooks x frames by forward
    if speech_pipes.asr is not None:
        heard = speech_pipes.asr(want.audio, want.sample_rate).text
        page.wait_for_function("want => document.querySelector('#speech-heard textarea').value === want", arg=heard)
    screenshot(page, "app-speech.png")


def test_speech_tab_transcribes_an_uploaded_recording(open_app, app_server, speech_pipes, tmp_path, screenshot):
    require_section(app_server, "ASR")
    import soundfile as sf
    if not shutil.which("espeak-ng"):
        pytest.fail("espeak-ng makes the recording: apt-get install espeak-ng (requirements/apt-speech.txt)")
    wav = tmp_path / "hello.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(wav), "Open the door please."], check=True)
    audio, rate = sf.read(str(wav), dtype="int16")       # what the browser upload hands the app
    want = speech_pipes.asr(audio, rate, decoder="ctc_speculative")

    page = open_app()
    page.get_by_role("tab", name="Speech").click()
    if page.locator("#speech-transcribe").is_hidden():
        page.get_by_text("Transcribe a recording").click()   # open the accordion
    page.locator("#speech-recording input[type=file]").set_input_files(str(wav))
    page.locator("#speech-recording audio").first.wait_for(state="attached")
    page.locator("#speech-transcribe").click()
    page.locator("#speech-asr-stats tr[data-decoder='ctc_speculative']").wait_for()
    assert page.locator("#speech-transcript textarea").input_value() == f"ctc_speculative: {want.text}"
    row = page.locator("#speech-asr-stats tr[data-decoder='ctc_speculative']")
    assert int(row.locator("td[data-stat='forwards']").inner_text()) == want.stats.num_forwards
    if speech_pipes.tts is None:
        screenshot(page, "app-speech.png")

    page = open_app()                                     # nothing recorded: a readable message
    page.get_by_role("tab", name="Speech").click()
    if page.locator("#speech-transcribe").is_hidden():
        page.get_by_text("Transcribe a recording").click()
    page.locator("#speech-transcribe").click()
    page.get_by_text("no audio: record or upload a clip to transcribe").first.wait_for()
    assert "Traceback" not in page.locator("body").inner_text()
