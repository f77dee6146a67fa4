"""The Speech tab in a real browser: text spoken by a codebook-parallel decoder raced against the
flat baseline (players, codebook grids on their own scales, what the recogniser heard, what the
result is), an error that clears the earlier result, three users at once, and a recording uploaded
and transcribed in the section below (open, not collapsed)."""
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


def test_speech_tab_speaks_like_the_library(open_app, app_server, speech_pipes, screenshot, checks):
    require_section(app_server, "TTS")
    want = speech_pipes.tts(TEXT, decoder="parallel", temperature=0.7, seed=0)
    flat = speech_pipes.tts(TEXT, decoder="flat", temperature=0.7, seed=0)

    page = checks.open_tab(open_app, "Speech")
    page.locator("#speech-text textarea").fill(TEXT)
    checks.pick(page, "speech-decoder", "parallel")
    page.locator("#speech-compare input[type=checkbox]").check()
    page.locator("#speech-run").click()
    page.locator("#speech-stats tr[data-decoder='parallel'][data-state='done']").wait_for()
    assert int(checks.stat(page, "speech", "parallel", "forwards")) == want.stats.num_forwards
    assert int(checks.stat(page, "speech", "parallel", "tokens")) == want.codes.numel()    # codes, Q x T
    assert int(checks.stat(page, "speech", "ar", "forwards")) == flat.stats.num_forwards   # the flat model: one code per forward
    page.locator("#speech-audio audio[src]").first.wait_for(state="attached")   # the players, loaded
    page.locator("#speech-ar-audio audio[src]").first.wait_for(state="attached")
    page.locator("#speech-grid img").wait_for()                         # codebooks x frames by forward
    page.locator("#speech-ar-grid img").wait_for()
    assert page.locator("#speech-wave").count() == 0                    # the player already shows the waveform
    checks.says_what_it_is(page, "speech", "parallel", compared=True)
    assert "CER of our recogniser on the speech 0.196" in page.locator("#speech-stats .ps-quality").inner_text()
    if speech_pipes.asr is not None:
        heard = speech_pipes.asr(want.audio, want.sample_rate).text
        page.wait_for_function("want => document.querySelector('#speech-heard textarea').value === want", arg=heard)
        assert page.locator("#speech-transcribe").is_visible()          # the recognition section is open
    screenshot(page, "app-speech.png")

    page.locator("#speech-text textarea").fill("  ")                    # then only spaces
    page.locator("#speech-run").click()
    checks.readable_error(page, "empty text: type a sentence to speak")
    checks.cleared(page, "speech", ["#speech-grid img", "#speech-ar-grid img", "#speech-heard textarea",
                                    "#speech-audio audio[src]"])


def test_speech_tab_three_users_at_once_hear_their_own_sentences(open_app, app_server, speech_pipes, checks):
    require_section(app_server, "TTS")
    from apps.speech import DEFAULT_TTS
    texts = ["Open the door.", "The cat sat on the mat.", "It is raining today."]
    pages = []
    for text in texts:
        page = checks.open_tab(open_app, "Speech")
        page.locator("#speech-text textarea").fill(text)
        pages.append(page)
    for page in pages:
        page.locator("#speech-run").click()
    for page, text in zip(pages, texts):
        want = speech_pipes.tts(text, decoder=DEFAULT_TTS, temperature=0.7, seed=0)
        page.locator(f"#speech-stats tr[data-decoder='{DEFAULT_TTS}'][data-state='done']").wait_for()
        assert int(checks.stat(page, "speech", DEFAULT_TTS, "tokens")) == want.codes.numel()
        assert int(checks.stat(page, "speech", DEFAULT_TTS, "forwards")) == want.stats.num_forwards
        if speech_pipes.asr is not None:
            heard = speech_pipes.asr(want.audio, want.sample_rate).text
            page.wait_for_function("w => document.querySelector('#speech-heard textarea').value === w", arg=heard)


def test_speech_tab_transcribes_an_uploaded_recording(open_app, app_server, speech_pipes, tmp_path, screenshot,
                                                      checks):
    require_section(app_server, "ASR")
    import soundfile as sf
    if not shutil.which("espeak-ng"):
        pytest.fail("espeak-ng makes the recording: apt-get install espeak-ng (requirements/apt-speech.txt)")
    wav = tmp_path / "hello.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(wav), "Open the door please."], check=True)
    audio, rate = sf.read(str(wav), dtype="float32")     # what the app's reader hands the recogniser
    flac = tmp_path / "hello.flac"                       # a FLAC: read by soundfile, no ffmpeg (issue 40, finding 3)
    sf.write(str(flac), audio, rate)
    audio, rate = sf.read(str(flac), dtype="float32")
    want = speech_pipes.asr(audio, rate, decoder="ctc_speculative")
    ar = speech_pipes.asr(audio, rate, decoder="ar")

    page = checks.open_tab(open_app, "Speech")
    page.locator("#speech-recording input[type=file]").set_input_files(str(flac))
    page.locator("#speech-recording audio").first.wait_for(state="attached")
    checks.pick(page, "speech-asr-decoder", "ctc_speculative")
    page.locator("#speech-asr-compare input[type=checkbox]").check()
    page.locator("#speech-transcribe").click()
    page.locator("#speech-asr-stats tr[data-decoder='ctc_speculative']").wait_for()
    assert page.locator("#speech-transcript textarea").input_value() == want.text
    assert page.locator("#speech-ar-transcript textarea").input_value() == ar.text
    assert int(checks.stat(page, "speech-asr", "ctc_speculative", "forwards")) == want.stats.num_forwards
    if want.stats.num_forwards == 0:      # the CTC draft was confident: no forward, so no tokens per forward
        assert checks.stat(page, "speech-asr", "ctc_speculative", "tokens_per_forward") == "–"
    checks.says_what_it_is(page, "speech-asr", "ctc_speculative", compared=True)
    if speech_pipes.tts is None:
        screenshot(page, "app-speech.png")

    page = checks.open_tab(open_app, "Speech")                      # nothing recorded: a readable message
    page.locator("#speech-transcribe").click()
    checks.readable_error(page, "no audio: record or upload a clip to transcribe")
