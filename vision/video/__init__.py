"""AR video generation: per-frame VQ codes over (t, h, w), a Llama video prior with a windowed
attention mask, and the suite's decoders with temporal drafts."""
