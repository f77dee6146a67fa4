"""chain decoders."""
