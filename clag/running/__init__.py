"""Running one config into a run folder: the layer behind ``python -m clag.run``.

Modules, each named for what it holds (imports point down)::

    loop        execute(): claim the folder, load the slice, build once, run episodes, finish
    episode     one episode: ingest or load its snapshot, answer its questions in fixed chunks
    results     score rows, aggregate metrics.json in one place, write it, track
    build       backend (coalesced when episodes run side by side), clients, embedders, seeding
    snapshots   memory snapshots keyed by what shapes ingestion
    provenance  what a run was computed with: code, packages, CPU flags / GPU, engine, dtype
    folder      the run folder: whose config it holds, the JSONL logs and their one reading policy
    spec        the run spec, the config hash and config diffs
    status      how far a sweep is: each run of its grid finished, half way or not started (read-only)

Nothing is imported here, so readers of run folders (tables, the notebook)
can use :mod:`clag.running.folder` without loading the runner's dependencies.
"""
