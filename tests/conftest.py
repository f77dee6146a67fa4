import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Drafts keep their fixed sizes in tests: a cost curve measured on a loaded machine would make the
# decoders' choices (and so the tests) depend on the load; the sizing tests pass their curves explicitly.
os.environ.setdefault("PARASUITE_COST", "0")
# Models load in float32 unless a test asks for a dtype: text's own default ("auto", bf16 where the CPU runs it
# natively) would make the same test run bf16 on one machine and fp32 on another (tests/text/test_text_dtype.py
# tests that default).
os.environ.setdefault("PARASUITE_DTYPE", "float32")
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))   # test helpers (tinymodels, scripted)

import pytest  # noqa: E402

TINY_CONTEXT = 96   # small, so "prompt longer than the context" is cheap to test


@pytest.fixture(scope="session")
def embedded_folder():
    """The converted embedded model folder (converts the GGUF on first use on this machine, ~30 s)."""
    from text.model import ensure_converted
    return ensure_converted()


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory, embedded_folder):
    """A folder with a random 2-layer Llama (hidden 32) and SmolLM2's tokenizer, saved like any model."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("tiny-llama")
    tok = AutoTokenizer.from_pretrained(str(embedded_folder), local_files_only=True)
    tok.save_pretrained(str(folder))
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=TINY_CONTEXT,
                      bos_token_id=1, eos_token_id=eos, pad_token_id=eos)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    model.save_pretrained(str(folder))
    return folder
