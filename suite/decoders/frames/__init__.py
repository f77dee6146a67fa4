"""frames decoders."""
