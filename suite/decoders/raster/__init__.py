"""raster decoders."""
