"""One file per decoding algorithm; `suite.registry.DECODERS` names them."""
