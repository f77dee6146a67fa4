"""Model adapters: transformers causal LMs, encoder-decoders, VLM families, the static cache and
the CPU linear-layer forms. They implement suite.ModelAdapter over the decoding core's cache."""
