"""ClassifierFreeGuidance is an adapter: every decoder gets CFG, and the maths is u + s (c - u)."""
import torch
from tinymodels import tiny_model

import suite
from suite import ClassifierFreeGuidance, HFCausalLM

COND = torch.tensor([[7, 3, 4, 5], [9, 3, 4, 5]])      # class token, then shared prefix
NULL = torch.tensor([[1, 3, 4, 5], [1, 3, 4, 5]])      # the null class in its place


def test_cfg_logits_combine_cond_and_uncond():
    model = tiny_model("llama")
    with torch.no_grad():
        cond, uncond = model(COND).logits, model(NULL).logits
    for scale in (0.0, 1.0, 3.0):
        cfg = ClassifierFreeGuidance(HFCausalLM(model), scale, NULL)
        cache = cfg.new_cache(2)
        mask = cache.attention_mask(torch.ones(4, 4, dtype=torch.bool).tril().expand(2, 4, 4))
        with torch.no_grad():
            got = cfg(COND, torch.arange(4).expand(2, 4), cache, mask)
        torch.testing.assert_close(got, uncond + scale * (cond - uncond), atol=1e-5, rtol=1e-5)


def test_every_decoder_composes_with_cfg():
    model = tiny_model("qwen2")
    cfg = ClassifierFreeGuidance(HFCausalLM(model), 2.5, NULL)
    ref = suite.generate(cfg, COND, decoder="ar", max_new_tokens=16)
    for name in ("jacobi", "sjd", "mc_sjd", "lookahead", "ngram"):
        out = suite.generate(cfg, COND, decoder=name, max_new_tokens=16)
        assert torch.equal(out.sequences, ref.sequences), name


def test_negative_scale_is_refused():
    import pytest
    with pytest.raises(ValueError, match="scale"):
        ClassifierFreeGuidance(HFCausalLM(tiny_model("llama")), -1.0, NULL)
