"""parasuite's shared decoding core: adapters, cache, sampling, acceptance rules, guidance,
the one decode loop and the registry of decoders."""
from .acceptance import accept_by_confidence, accept_greedy_prefix, accept_multi_draft, accept_speculative
from .models.adapters import AdapterBase, AdapterConfig, HFCausalLM, ModelAdapter, as_adapter, layer_truncated_draft
from .models.capabilities import Capabilities
from .decoders.base import DecoderBase
from .params import RequestParams
from .cache import KVCache
from .api import GenerateOutput, generate, prepare, stream
from .guidance import ClassifierFreeGuidance
from .inputs import CTCHypothesis, RequestInputs
from .loop import Acceptance, DecodeResult, DecodeState, Decoder, Draft, Step, decode, decode_steps
from .registry import (DECODERS, REGISTRY, TEXT_DECODERS, DecoderEntry, decoder_entry, decoder_options, guarantee,
                       list_decoders, make_decoder, parse_option)
from .sampling import SamplingParams, logits_to_probs, sample
from .stats import DecodeStats

__all__ = [
    "Acceptance", "AdapterBase", "AdapterConfig", "Capabilities", "DecoderBase", "RequestParams", "CTCHypothesis", "ClassifierFreeGuidance", "DECODERS", "DecodeResult", "DecodeState",
    "DecodeStats", "Decoder", "DecoderEntry", "Draft", "GenerateOutput", "HFCausalLM", "KVCache", "ModelAdapter",
    "RequestInputs", "SamplingParams", "Step", "TEXT_DECODERS", "accept_by_confidence", "accept_greedy_prefix", "accept_multi_draft",
    "accept_speculative", "as_adapter", "decode", "decode_steps", "decoder_entry", "decoder_options", "generate",
    "guarantee", "list_decoders", "REGISTRY",
    "layer_truncated_draft", "logits_to_probs", "make_decoder", "parse_option", "prepare", "sample", "stream",
]
