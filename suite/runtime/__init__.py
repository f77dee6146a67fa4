"""Job and runtime helpers around decoding: the local/Ray job runner, storage (atomic writes, JSON,
the cache folder, weights), training loops, CLI option parsing and shared metrics."""
