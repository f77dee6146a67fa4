"""parasuite's shared decoding core: adapters, cache, sampling, acceptance rules, guidance,
the one decode loop and the registry of decoders."""
from .acceptance import accept_by_confidence, accept_greedy_prefix, accept_multi_draft, accept_speculative
from .adapters import AdapterConfig, HFCausalLM, ModelAdapter, as_adapter, layer_truncated_draft
from .cache import KVCache
from .api import GenerateOutput, generate, prepare, stream
from .guidance import ClassifierFreeGuidance
from .loop import Acceptance, DecodeResult, DecodeState, Decoder, Draft, Step, decode, decode_steps
from .registry import DECODERS, TEXT_DECODERS, decoder_options, make_decoder, parse_option, register
from .sampling import SamplingParams, logits_to_probs, sample
from .stats import DecodeStats

__all__ = [
    "Acceptance", "AdapterConfig", "ClassifierFreeGuidance", "DECODERS", "DecodeResult", "DecodeState",
    "DecodeStats", "Decoder", "Draft", "GenerateOutput", "HFCausalLM", "KVCache", "ModelAdapter",
    "SamplingParams", "Step", "TEXT_DECODERS", "accept_by_confidence", "accept_greedy_prefix", "accept_multi_draft",
    "accept_speculative", "as_adapter", "decode", "decode_steps", "decoder_options", "generate",
    "layer_truncated_draft", "logits_to_probs", "make_decoder", "parse_option", "prepare", "register", "sample", "stream",
]
