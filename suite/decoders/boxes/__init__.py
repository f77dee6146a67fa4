"""box decoders: a grounding model's box blocks (GRIT-style coordinate tokens) decoded in parallel."""
