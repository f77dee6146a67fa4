"""Batch jobs over many inputs, in this process (`--engine local`) or on a Ray cluster
(`--engine ray`, Ray Data: `map_batches` over an `ActorPoolStrategy` pool of workers).

A CLI describes its job as a `BatchJob` (`items`): its inputs (`Item`: a key naming the input, the
payload a worker gets, the files that exist once it is done), a worker class and `write`. The
worker class is the only part that runs remotely: `Worker(**worker_args)` loads the model once (per
actor), and `worker(payload)` maps one input to one result dict (its keys: the job's `fields`, the
row schema). `write(item, result)` runs here, on the driver, and writes that input's outputs
atomically (suite.runtime.storage), so both engines (`engines`) write the same files from the same
results. A worker whose calls share forwards (its model's suite.scheduler.Scheduler) says how many
inputs it takes at once (`concurrency`): each engine (the local one, every Ray actor) keeps that
many in flight.

`run.run_batch` lists what is pending (resume: a manifest row done with the same settings whose
outputs exist, or the job's own `is_done`), runs the workers, keeps one progress bar over inputs,
appends one manifest row per input (ok / skipped / error with the message) and returns a `Summary`.
A failing input is an error row naming it, never a stopped job or a dropped Ray block; a worker
process that dies is restarted by Ray and its rows retried; rows that arrive twice are written once.
`cli` holds what a batch CLI shares: the engine flags and the exit status.

    items.py    Item, BatchJob, Outcome, Summary, the manifest (fingerprint, rows, resume, compaction)
    engines.py  Engine; the local engine and the Ray Data engine (joining or starting a cluster)
    run.py      run_batch: pending inputs, the progress bar, delivery in order, the manifest
    cli.py      --engine and its flags, engine_from_args, cli_exit, run_cli
"""
