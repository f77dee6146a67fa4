"""Tiny random models of real transformers architectures, built from config in-process."""
from __future__ import annotations

import torch

VOCAB = 99


def tiny_model(arch: str, vocab: int = VOCAB, seed: int = 0, sharpen: float = 8.0):
    import transformers as tf
    common = dict(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  eos_token_id=None, pad_token_id=0, bos_token_id=None)
    configs = {
        "llama": lambda: tf.LlamaConfig(**common),
        "qwen2": lambda: tf.Qwen2Config(**common),
        "mistral": lambda: tf.MistralConfig(**common, sliding_window=None),
        "gpt2": lambda: tf.GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=4, n_positions=256,
                                      eos_token_id=None, pad_token_id=0, bos_token_id=None),
    }
    torch.manual_seed(seed)
    config = configs[arch]()
    model = tf.AutoModelForCausalLM.from_config(config).eval()
    # sharpen the random logits so greedy paths are not decided by float noise
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(sharpen)
    return model


ARCHS = ("llama", "qwen2", "mistral", "gpt2")


def tiny_prior(codebook=16, classes=3, grid=(4, 4), seed=0, sharpen=4.0):
    """A tiny random class-conditional image prior (vision's Llama layout) behind its adapter."""
    from vision.prior import ImagePrior, build_prior
    torch.manual_seed(seed)
    model = build_prior(codebook, classes, grid, hidden=32, layers=2, heads=4).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(sharpen)
    meta = {"codebook_size": codebook, "classes": [f"c{i}" for i in range(classes)], "grid": list(grid)}
    return ImagePrior(model, meta)


def tiny_tts(seed=0, local_frames=1, codebooks=4, codebook_size=16):
    """A tiny random TTS frame model (speech's layout) with a local transformer and stacked heads."""
    from speech.tts_model import TTSConfig, TTSModel
    torch.manual_seed(seed)
    cfg = TTSConfig(num_codebooks=codebooks, codebook_size=codebook_size, hidden_size=32, num_layers=2, num_heads=2,
                    symbols="a b c", local_layers=1, local_hidden=16, stack_frames=2, local_frames=local_frames)
    model = TTSModel(cfg).eval()
    with torch.no_grad():     # sharpen so greedy paths are not decided by float noise
        model.local.heads.mul_(8.0)
        for head in list(model.heads) + list(model.stack_heads):
            head.weight.mul_(8.0)
    return model


def tiny_video(codebook=8, frames=3, grid=(4, 4), radius=1, seed=0, sharpen=4.0, positions="frame",
               inputs="both", copy="motion"):
    """A tiny random video prior (vision/video/prior.py's layout and window mask) behind its adapter;
    positions "frame" (frame-aware rotary, vision/video/rotary.py, as shipped) or "1d" (older folders);
    inputs "both" (the previous frame's codes as input tables and a copy head, vision/video/prevframe.py,
    random weights so they matter), "tables", "copy" or None (older folders); copy "motion" (the
    motion-told copy, vision/video/motioncopy.py: m0 told to read (0, -1), m1 learnt; random weights)
    or None."""
    from vision.video import motioncopy, prevframe, rotary
    from vision.video.prior import VideoLayout, VideoPrior, build_video_prior
    meta = {"codebook_size": codebook, "classes": ["a", "b"], "motions": ["m0", "m1"], "frames": frames,
            "grid": list(grid), "radius": radius}
    if positions == "frame":
        meta["positions"] = rotary.meta()
    if inputs is not None:
        meta["inputs"] = prevframe.meta(radius, inputs in ("tables", "both"), inputs in ("copy", "both"))
    if copy == "motion":
        meta["copy"] = motioncopy.meta(meta["motions"], {"m0": (1, 0)} if radius else {})
    torch.manual_seed(seed)
    model = build_video_prior(VideoLayout.from_meta(meta), hidden=32, layers=2, heads=4,
                              inputs=meta.get("inputs"), copy=meta.get("copy")).eval()
    with torch.no_grad():     # sharpen so greedy paths are not decided by float noise
        model.get_output_embeddings().weight.mul_(sharpen)
        for name, param in ([] if inputs is None else prevframe.module(model).named_parameters()):
            param.normal_(0, {"weight": 1.0, "gate": 0.3, "gate_bias": 0.05}[name])
        for param in ([] if copy is None else motioncopy.module(model).parameters()):
            param.normal_(0, 1.0)
    return VideoPrior(model, meta)


def tiny_eagle_head(model, k=64, seed=0):
    """A random EAGLE draft head for a tiny target (sharpened: it drafts confidently, deep trees)."""
    from suite.decoders.chain.eagle_head import EagleHead
    torch.manual_seed(seed)
    head = EagleHead.for_target(model.config, min(k, model.config.vocab_size))
    with torch.no_grad():
        head.fc.weight.mul_(4.0)
    return head.eval()


# DiffusionGemma always builds Gemma 4's vision tower (16 layers of 768 by default): a tiny one keeps it cheap
TINY_VISION = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                   num_key_value_heads=2, head_dim=8, position_embedding_size=64)


def tiny_diffusion_gemma(canvas_length: int = 8, sliding_window: int = 64, init: float = 2.0, seed: int = 0, **text):
    """A tiny random DiffusionGemmaForBlockDiffusion (vocab 99, hidden 32, 2 layers: one sliding, one full;
    2 experts). init: the weights' init scale; a large one makes the canvas predictions confident, as a
    trained model's are, so the block commit rules fill several slots per forward."""
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion
    tc = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
              num_key_value_heads=1, head_dim=16, global_head_dim=16, sliding_window=sliding_window,
              max_position_embeddings=256, layer_types=["sliding_attention", "full_attention"], num_experts=2,
              top_k_experts=1, moe_intermediate_size=32, initializer_range=init, **text)
    config = DiffusionGemmaConfig(text_config=tc, vision_config=TINY_VISION, canvas_length=canvas_length,
                                  initializer_range=init)
    torch.manual_seed(seed)
    return DiffusionGemmaForBlockDiffusion(config).eval()


def tiny_word_tokenizer(vocab: int = VOCAB):
    """A word-level tokenizer of `vocab` ids ("<pad>", "<eos>", "<bos>", then "w3" .. ), built in-process."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    words = {"<pad>": 0, "<eos>": 1, "<bos>": 2, **{f"w{i}": i for i in range(3, vocab)}}
    tok = Tokenizer(models.WordLevel(words, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>")
