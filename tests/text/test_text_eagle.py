"""The embedded SmolLM2's EAGLE head (text/weights/eagle) and decoder="auto": the head loads by
itself, greedy output equals `ar`, it drafts with success, and missing, corrupt or foreign weights
fail with the fix named (auto runs without eagle and says so)."""
import shutil
import warnings

import pytest
import torch

from text.generator import EAGLE_WEIGHTS

PROMPT = "Explain how a hash table works to a beginner."


@pytest.mark.skipif(not (EAGLE_WEIGHTS / "model.safetensors").is_file(), reason="no trained head")
def test_eagle_and_auto_equal_ar(smol):
    ref = smol.generate(PROMPT, decoder="ar", max_new_tokens=32, chat=True)
    for name in ("eagle", "auto"):
        res = smol.generate(PROMPT, decoder=name, max_new_tokens=32, chat=True)
        assert res.token_ids == ref.token_ids, name
    res = smol.generate(PROMPT, decoder="eagle", max_new_tokens=32, chat=True)
    assert res.stats.num_forwards < 32       # the trained head's drafts are accepted
    assert smol.generate(PROMPT, decoder="auto", max_new_tokens=32, chat=True).stats.events


def test_missing_or_corrupt_weights(smol, tmp_path):
    import text
    gen = text.TextGenerator(smol.model, smol.tokenizer, draft_folder=tmp_path / "missing")
    with pytest.raises(ValueError, match="python -m text.train_draft"):
        gen.generate("Hi", decoder="eagle", max_new_tokens=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ref = gen.generate("Hi", decoder="ar", max_new_tokens=4)
        assert gen.generate("Hi", decoder="auto", max_new_tokens=4).token_ids == ref.token_ids
    assert any("without eagle" in str(w.message) and "text.train_draft" in str(w.message) for w in caught)
    bad = tmp_path / "bad"
    bad.mkdir()
    if (EAGLE_WEIGHTS / "config.json").is_file():
        shutil.copy(EAGLE_WEIGHTS / "config.json", bad / "config.json")
    (bad / "model.safetensors").write_bytes(b"\0" * 64)
    gen = text.TextGenerator(smol.model, smol.tokenizer, draft_folder=bad)
    with pytest.raises(ValueError, match="python -m text.train_draft"):
        gen.generate("Hi", decoder="eagle", max_new_tokens=2)


def test_a_head_for_another_model_is_refused(tiny, tmp_path):
    from suite.decoders.chain.eagle_head import EagleHead
    import text
    torch.manual_seed(0)
    head = EagleHead.for_target(tiny.model.config, 64)
    head.config["vocab_size"] = 1000          # trained for another vocabulary
    head.save(tmp_path / "other")
    gen = text.TextGenerator(tiny.model, tiny.tokenizer, draft_folder=tmp_path / "other")
    with pytest.raises(ValueError, match=r"vocabulary 1000 and hidden size 32; the target has vocabulary \d+"):
        gen.generate("Hi", decoder="eagle", max_new_tokens=2)
