"""blocks decoders."""
