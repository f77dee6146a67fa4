"""Tiny random speech models of transformers families (Whisper, MusicGen, Dia, CSM), saved with their
processors as a user's folder would be, for tests/speech/test_speech_hf_*.py."""
from __future__ import annotations

import json
import shutil
from contextlib import contextmanager

import torch

K = 4          # MusicGen codebooks
DIA_DELAYS = (0, 2, 3, 5)   # Dia's lags: codebook k lags DIA_DELAYS[k] frames (the real one: 0, 8, 9, ..., 15)
DIA_CODES = 32               # DAC codebook size; Dia's eos, pad, bos ids follow: 32, 33, 34
CSM_Q, CSM_V = 4, 16         # CSM's Mimi codebooks and their size (code 0 is CSM's EOS, V - 1 its pad)

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


def save_tiny_dia(folder, guidance_scale: float | None = None, top_k: int | None = None, max_length: int | None = None,
                  with_codec: bool = True, with_tokenizer: bool = True) -> None:
    """A tiny Dia (byte text encoder, decoder over len(DIA_DELAYS) DAC codebooks of DIA_CODES at
    800 Hz / 100 frames/s) with its processor in `folder` and its DAC codec in folder/audio_tokenizer."""
    from transformers import (DacConfig, DacModel, DiaConfig, DiaDecoderConfig, DiaEncoderConfig, DiaFeatureExtractor,
                              DiaForConditionalGeneration, DiaProcessor, DiaTokenizer)
    c, v = len(DIA_DELAYS), DIA_CODES
    enc = DiaEncoderConfig(max_position_embeddings=64, num_hidden_layers=1, hidden_size=16, num_attention_heads=2,
                           num_key_value_heads=2, head_dim=8, intermediate_size=32)
    dec = DiaDecoderConfig(max_position_embeddings=64, num_hidden_layers=2, hidden_size=24, intermediate_size=48,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=12, cross_num_attention_heads=2,
                           cross_head_dim=8, cross_num_key_value_heads=2, cross_hidden_size=16, vocab_size=v + 3,
                           num_channels=c, eos_token_id=v, pad_token_id=v + 1, bos_token_id=v + 2)
    torch.manual_seed(0)
    model = DiaForConditionalGeneration(DiaConfig(encoder_config=enc, decoder_config=dec,
                                                  delay_pattern=list(DIA_DELAYS))).eval()
    with torch.no_grad():   # EOS a little likelier: utterances end by EOS at different frames
        model.logits_dense.weight.view(c, v + 3, -1)[0, v] *= 1.5
    gen = model.generation_config
    gen.guidance_scale, gen.max_length, gen._from_model_config = guidance_scale, max_length, False
    gen.do_sample, gen.top_k = top_k is not None, top_k       # a config may set top_k only for sampling
    model.save_pretrained(folder)
    codec = DacModel(DacConfig(encoder_hidden_size=4, downsampling_ratios=[2, 4], decoder_hidden_size=8, n_codebooks=c,
                               codebook_size=v, codebook_dim=4, sampling_rate=800, hop_length=8))
    if with_tokenizer:
        DiaProcessor(feature_extractor=DiaFeatureExtractor(sampling_rate=800, hop_length=8), tokenizer=DiaTokenizer(),
                     audio_tokenizer=codec).save_pretrained(folder)
    if with_codec:
        codec.save_pretrained(f"{folder}/audio_tokenizer")


def save_tiny_csm(folder, with_processor: bool = True) -> None:
    """A tiny CSM (Llama backbone and depth decoder over CSM_Q Mimi codebooks of CSM_V at 800 Hz,
    character tokenizer) with its processor in `folder`."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (CsmConfig, CsmDepthDecoderConfig, CsmForConditionalGeneration, CsmProcessor,
                              EncodecFeatureExtractor, MimiConfig, PreTrainedTokenizerFast)
    q, v = CSM_Q, CSM_V
    vocab = {c: i for i, c in enumerate("abcdefghijklmnopqrstuvwxyz .,[]0123456789")}
    for special in ["<|begin_of_text|>", "<|end_of_text|>", "<|AUDIO|>", "<|audio_eos|>", "<pad>"]:
        vocab[special] = len(vocab)
    chars = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    chars.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok = PreTrainedTokenizerFast(tokenizer_object=chars, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>",
                                  pad_token="<pad>", additional_special_tokens=["<|AUDIO|>", "<|audio_eos|>"])
    mimi = MimiConfig(sampling_rate=800, hidden_size=16, num_filters=4, upsampling_ratios=[4, 2], codebook_size=v,
                      codebook_dim=8, num_quantizers=q, vector_quantization_hidden_dimension=8, upsample_groups=16,
                      num_hidden_layers=1, intermediate_size=32, num_attention_heads=2, num_key_value_heads=2,
                      sliding_window=16, kernel_size=3, last_kernel_size=3)
    depth = CsmDepthDecoderConfig(num_codebooks=q, backbone_hidden_size=24, vocab_size=v, hidden_size=16,
                                  intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                                  num_key_value_heads=1, max_position_embeddings=q + 1)
    cfg = CsmConfig(num_codebooks=q, vocab_size=v, text_vocab_size=len(tok), hidden_size=24, intermediate_size=48,
                    num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                    pad_token_id=vocab["<pad>"], codebook_pad_token_id=v - 1, codebook_eos_token_id=0,
                    bos_token_id=vocab["<|begin_of_text|>"], audio_token_id=vocab["<|AUDIO|>"],
                    audio_eos_token_id=vocab["<|audio_eos|>"], depth_decoder_config=depth.to_dict(),
                    codec_config=mimi.to_dict())
    torch.manual_seed(0)
    model = CsmForConditionalGeneration(cfg).eval()
    with torch.no_grad():   # code 0 (CSM's EOS) a twin of a frequent code per head: rows end at different frames
        for q, twin in enumerate((12, 12, 2)):
            head = model.lm_head.weight if q == 0 else model.depth_decoder.codebooks_head.weight[q - 1].T
            head[0] = 1.02 * head[twin]
    model.generation_config._from_model_config = model.depth_decoder.generation_config._from_model_config = False
    model.save_pretrained(folder)
    if with_processor:
        CsmProcessor(feature_extractor=EncodecFeatureExtractor(feature_size=1, sampling_rate=800),
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
