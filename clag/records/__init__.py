"""What a run folder holds, in one package: its schema, its files' readers and writers, and finished runs.

* :mod:`clag.records.schema`: the ``TypedDict`` of every record
  (``predictions.jsonl`` rows, ``episodes.jsonl`` records, ``metrics.json``
  with its ``run`` and ``judge`` sections) and the schema version.
* :mod:`clag.records.files`: every JSON and JSONL file of a run, read and
  written one way (atomic rewrites, kill-safe append logs).
* :mod:`clag.records.runs`: a finished run read back (:class:`RunRecord`,
  :func:`find_runs`), for tables, ``clag.compare`` and the notebook.

It is the bottom floor: it imports nothing else of the project, so the
runner that writes the records and every reader stand on it.
"""
