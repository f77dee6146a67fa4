"""text.load of a GGUF file: a tiny llama written in-process with the `gguf` package, loaded offline
at float32, its weights and logits equal to the model they were written from, decoded by chain decoders."""
import numpy as np
import pytest
import torch

import text
from text import model as tm

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 32, 2, 4, 2, 64


def _vocab() -> list[str]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    return list(bytes_to_unicode().values()) + ["<|im_start|>", "<|im_end|>"]


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's q/k row order (convert_hf_to_gguf's permute): transformers reverses it on load."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    """(path of a tiny llama GGUF in F32, the transformers LlamaForCausalLM it was written from)."""
    import gguf
    from transformers import LlamaConfig, LlamaForCausalLM
    vocab = _vocab()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=256,
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                      bos_token_id=len(vocab) - 2, eos_token_id=len(vocab) - 1)
    ref = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_(0, 0.3)
    sd = {k: v.numpy().astype(np.float32) for k, v in ref.state_dict().items()}
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(vocab))
    w.add_tokenizer_model("gpt2")
    w.add_token_list(vocab)
    w.add_token_types([1] * (len(vocab) - 2) + [3, 3])
    w.add_token_scores([0.0] * len(vocab))
    w.add_bos_token_id(len(vocab) - 2)
    w.add_eos_token_id(len(vocab) - 1)
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    w.add_tensor("output.weight", sd["lm_head.weight"])
    parts = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    for i in range(LAYERS):
        for hf, gg in parts.items():
            t = sd[f"model.layers.{i}.{hf}.weight"]
            if hf == "self_attn.q_proj":
                t = _permute(t, HEADS)
            elif hf == "self_attn.k_proj":
                t = _permute(t, KV_HEADS)
            w.add_tensor(f"blk.{i}.{gg}.weight", t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, ref


@pytest.fixture(scope="module")
def loaded(tiny_gguf, tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("PARASUITE_CACHE", str(tmp_path_factory.mktemp("cache")))
    try:
        yield text.load(tiny_gguf[0], progress=False, engine="torch")
    finally:
        mp.undo()


def test_gguf_loads_at_float32_with_the_written_weights(tiny_gguf, loaded):
    _, ref = tiny_gguf
    assert next(loaded.model.parameters()).dtype == torch.float32
    ids = torch.tensor([[3, 70, 71, 72, 80, 90, 100, 5]])
    with torch.no_grad():
        want = ref(input_ids=ids).logits
        got = loaded.model(input_ids=ids).logits
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_gguf_model_decodes_with_chain_decoders_exactly(loaded):
    prompt = "hello hello hello world"
    ar = loaded.generate(prompt, decoder="ar", max_new_tokens=16)
    assert len(ar.token_ids) > 0
    for name in ("ngram", "jacobi"):
        assert loaded.generate(prompt, decoder=name, max_new_tokens=16).token_ids == ar.token_ids


def test_gguf_second_load_reads_the_converted_folder(tiny_gguf, loaded, monkeypatch):
    monkeypatch.setattr(tm, "_convert", lambda *a: pytest.fail("converted twice"))
    again = text.load(tiny_gguf[0], progress=False, engine="torch")      # the module's cache folder (the `loaded` fixture)
    assert tm.is_converted(tm.gguf_cache_dir(tiny_gguf[0]))
    assert again.generate("hello", decoder="ar", max_new_tokens=4).token_ids == \
        loaded.generate("hello", decoder="ar", max_new_tokens=4).token_ids


def test_missing_gguf_names_the_fix(tmp_path):
    with pytest.raises(ValueError, match="no GGUF file"):
        text.load(tmp_path / "absent.gguf", progress=False)
