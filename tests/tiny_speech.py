"""Tiny random speech models of transformers families (Whisper, MusicGen), saved with their
processors as a user's folder would be, for tests/speech/test_speech_hf_*.py."""
from __future__ import annotations

import json
import shutil
from contextlib import contextmanager

import torch

K = 4          # MusicGen codebooks

SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|fr|>", "<|translate|>", "<|transcribe|>",
            "<|notimestamps|>"]


def save_tiny_whisper(folder, seed: int = 0, decoder_layers: int = 3, with_processor: bool = True) -> dict:
    """A tiny multilingual Whisper (1 s windows) with its processor in `folder`; returns the special ids."""
    from transformers import (WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration,
                              WhisperProcessor, WhisperTokenizer)
    chars = list("abcdefghijklmnopqrstuvwxyz") + ["Ġ", ".", ","]
    tok = WhisperTokenizer(vocab={c: i for i, c in enumerate(chars)}, merges=[])
    tok.add_tokens(SPECIALS, special_tokens=True)
    ids = {s: tok.convert_tokens_to_ids(s) for s in SPECIALS}
    fe = WhisperFeatureExtractor(feature_size=16, chunk_length=1)
    eos = ids["<|endoftext|>"]
    cfg = WhisperConfig(vocab_size=len(tok), num_mel_bins=16, d_model=32, encoder_layers=2, decoder_layers=decoder_layers,
                        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
                        max_source_positions=fe.nb_max_frames // 2, max_target_positions=48, init_std=0.5,
                        decoder_start_token_id=ids["<|startoftranscript|>"], eos_token_id=eos, pad_token_id=eos,
                        bos_token_id=eos, suppress_tokens=[3, 5], begin_suppress_tokens=[eos, 26])
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(cfg).eval()
    with torch.no_grad():   # EOS a little above "h" (tied head): transcripts end at different lengths
        table = model.model.decoder.embed_tokens.weight
        table[eos] = 1.05 * table[tok.convert_tokens_to_ids("h")]
    gen = model.generation_config
    gen.lang_to_id = {"<|en|>": ids["<|en|>"], "<|fr|>": ids["<|fr|>"]}
    gen.task_to_id = {"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]}
    gen.no_timestamps_token_id = ids["<|notimestamps|>"]
    gen.is_multilingual, gen.max_length, gen._from_model_config = True, 40, False
    model.save_pretrained(folder)
    if with_processor:
        WhisperProcessor(feature_extractor=fe, tokenizer=tok).save_pretrained(folder)
    return ids


def save_tiny_musicgen(folder, guidance_scale: float | None = None, with_processor: bool = True) -> None:
    """A tiny MusicGen (T5 text encoder, EnCodec at 800 Hz / 100 frames/s, K codebooks of 32) with its
    processor in `folder`."""
    from transformers import (EncodecConfig, EncodecFeatureExtractor, MusicgenConfig, MusicgenDecoderConfig,
                              MusicgenForConditionalGeneration, MusicgenProcessor, T5Config, T5Tokenizer)
    words = ["<pad>", "</s>", "<unk>"] + ["▁" + w for w in "a b c d e hello there music drum piano".split()] + \
        list("abcdehlortmusicpnz")
    tok = T5Tokenizer(vocab=[(w, -float(i)) for i, w in enumerate(words)], extra_ids=0)
    cfg = MusicgenConfig(
        text_encoder=T5Config(vocab_size=len(tok), d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2).to_dict(),
        audio_encoder=EncodecConfig(codebook_size=32, hidden_size=8, num_filters=4, num_residual_layers=1,
                                    upsampling_ratios=[4, 2], codebook_dim=8, target_bandwidths=[4.0],
                                    sampling_rate=800, num_lstm_layers=1).to_dict(),
        decoder=MusicgenDecoderConfig(vocab_size=32, hidden_size=24, num_hidden_layers=2, num_attention_heads=2,
                                      ffn_dim=32, num_codebooks=K, max_position_embeddings=64, pad_token_id=32,
                                      bos_token_id=32, decoder_start_token_id=32).to_dict())
    torch.manual_seed(0)
    model = MusicgenForConditionalGeneration(cfg).eval()
    gen = model.generation_config
    gen.max_length, gen.guidance_scale, gen._from_model_config = 20, guidance_scale, False
    model.save_pretrained(folder)
    if with_processor:
        MusicgenProcessor(feature_extractor=EncodecFeatureExtractor(feature_size=1, sampling_rate=800),
                          tokenizer=tok).save_pretrained(folder)


def with_setting(folder, tmp_path, setting: str, value):
    """A copy of a model folder whose generation_config.json sets `setting` to `value`."""
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    path = copy / "generation_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), setting: value}))
    return copy


@contextmanager
def one_thread():
    """Tiny models on a shared CPU: many threads make each forward ~50x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
