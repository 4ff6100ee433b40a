"""The paper's tables rendered from finished runs, beside the paper's own numbers.

Use::

    python -m clag.tables [--runs runs] [--out results/tables]

or from Python (notebooks, tests)::

    from clag.tables.render import render_all
    render_all(Path("runs"), Path("results/tables"))

Modules: ``paper`` (the paper's numbers), ``specs`` (one YAML spec per table
in ``configs/tables/``), ``collect`` (finished runs and the values they
hold), ``render`` (Markdown, LaTeX, CSV and the index), ``cases`` (Tables
11-14 from predictions and cluster telemetry, with an LLM failure judge),
``plots`` (PNG figures).
"""
