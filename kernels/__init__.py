"""The decoding ops every decoder shares, each written once: acceptance (greedy prefix,
speculative), sampling (filtered probabilities, the inverse-CDF draw, logits -> token) and draft
masks (causal, block causal, tree). `reference` holds them in pure torch (the default, and the
test oracle); `triton_ops` holds Triton forms of the three hot ones (`greedy_prefix`,
`speculative_accept`, `sample_logits`), which decide the same on the same uniforms.

The decode path reaches them through suite: acceptance in suite.acceptance and
suite.decoders.chain.base, sampling in suite.sampling (`logits_to_probs`, `sample`, `draw`), masks
in suite.draft (causal), suite.decoders.chain.tree (trees) and suite.decoders.blocks.block_diffusion
(block causal). `kernels.op(name, device_type)` returns the implementation the dispatch table picks
for an op with a Triton form (`PARASUITE_KERNELS=torch|triton|auto`, default auto: Triton on CUDA
tensors when Triton is importable, the reference otherwise); the others are imported from
`kernels.reference`. `flex_masks` gives the same masks as FlexAttention mask functions and block
masks, for an adapter whose attention takes them (none of the shipped adapters does yet; they are
tested equal to the references). Importing this package imports neither Triton nor transformers.
"""
from .dispatch import OPS, op

__all__ = ["OPS", "op"]
