"""Issue 40, finding 10: what API clients get. Every endpoint's outputs are named (no `value_26`),
a transcript comes alone (ar's in its own output, the stats apart), the file a request needs is
marked required (no example file on the server standing in for it); and through gradio_client
against `python -m apps`, /transcribe reads a FLAC (issue 40, finding 3) into those outputs."""
import numpy as np
import pytest


class StandIn:
    """A pipeline the API description never runs (only the tabs' components are read)."""
    decoders = ("flat", "delay", "parallel")
    classes, grid = ("circle",), (4, 4)

    def __getattr__(self, name):
        raise AttributeError(name)


@pytest.fixture(scope="module")
def endpoints():
    import apps.document
    import apps.grounding
    import apps.speech
    import apps.text
    named = {}
    for demo in (apps.text.build_demo(StandIn()), apps.grounding.build_demo(StandIn()),
                 apps.document.build_demo(StandIn()),
                 apps.speech.build_demo(apps.speech.SpeechPipelines(StandIn(), StandIn()))):
        named.update(demo.get_api_info()["named_endpoints"])
    return named


def test_every_output_is_named(endpoints):
    assert {"/generate", "/ground", "/read_document", "/speak", "/transcribe"} <= set(endpoints)
    for name, info in endpoints.items():
        labels = [r["label"] for r in info["returns"]]
        assert all(label and not label.startswith("value_") for label in labels), (name, labels)


def test_the_input_a_request_needs_is_required(endpoints):
    required = {name: [p["parameter_name"] for p in info["parameters"] if not p["parameter_has_default"]]
                for name, info in endpoints.items()}
    assert required["/ground"] == ["image"] and required["/read_document"] == ["path"]
    assert required["/transcribe"] == ["recording"]
    for info in endpoints.values():                      # no server file stands in as a default
        for p in info["parameters"]:
            assert "/tmp/" not in str(p.get("parameter_default")), p


def test_transcribe_returns_the_transcript_ar_s_and_the_stats_apart(endpoints):
    assert [r["label"] for r in endpoints["/transcribe"]["returns"]] == \
        ["Transcript", "Transcript (ar baseline)", "Recognition stats"]


def test_transcribe_through_gradio_client_reads_a_flac(app_server, require_tab, tmp_path):
    require_tab("Speech")
    import soundfile as sf
    from gradio_client import Client, handle_file

    import speech
    from speech.data import synthesize
    audio = synthesize("Open the door.", "flite:slt").astype(np.float32)
    sf.write(str(tmp_path / "clip.flac"), audio, 16000)
    want_audio, rate = sf.read(str(tmp_path / "clip.flac"), dtype="float32")
    asr = speech.load_asr()
    want, ar = asr(want_audio, rate, decoder="ctc_speculative"), asr(want_audio, rate, decoder="ar")
    client = Client(app_server[0], verbose=False)
    transcript, ar_transcript, stats = client.predict(handle_file(str(tmp_path / "clip.flac")), "ctc_speculative",
                                                      True, "", api_name="/transcribe")
    assert (transcript, ar_transcript) == (want.text, ar.text)
    assert "data-decoder='ctc_speculative'" in stats and "data-guarantee='lossy'" in stats
