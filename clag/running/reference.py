"""The reference run's sweeps: the order ``make reference`` runs them in, and the grids they cover.

One list, read by everything that walks the reference: ``make reference`` runs
:data:`SWEEPS` (``python -m clag.running.reference``), ``make reference-status``
and ``make reference-replay`` walk :data:`GRIDS` (``--reference``), and the test
that no committed run folder is orphaned checks the folders against them.

The order of :data:`SWEEPS` makes the central claims testable soonest; the results
do not depend on it. The first reference (finished 2026-12-02: CLAG and its two
closest baselines first, then the other runs, then the ablations) and the
calling-convention experiment (``results/reference/conventions/``) replay from the
committed calls. Then the reference under the corrected conventions (issue 29):
LoCoMo's RAG, A-mem and CLAG first, the verdict's core; then memory growth (the
paper's central claim; its first 150 turns are the core's); then the other
corrected runs; then CLAG and A-mem with the authors' code settings (the costliest
grid: sampled, 1000-token budgets on every call, no retry); then the ablations and
sensitivity sweeps. Table 6 runs last, on the larger stand-in's own server.

    python -m clag.running.reference                 # every sweep but Table 6's, in order
    python -m clag.running.reference --larger-backbone
"""

from __future__ import annotations

import argparse
import subprocess
import sys

# Memory growth (issue 30): checkpoints in ascending order, so that each replays the one before from the
# cache and pays only for the new turns (configs/experiment/reference_growth.yaml)
GROWTH = tuple(("experiment=reference_growth", f"limit.items={items}") for items in (150, 300, 1000))

# What `make reference` runs on the 0.5B server, in order
SWEEPS: tuple[tuple[str, ...], ...] = (
    ("experiment=reference", "method=rag,amem,clag"),
    ("experiment=reference",),
    ("experiment=reference_ablations",),
    ("experiment=reference_conventions",),
    ("experiment=reference_corrected", "dataset=locomo", "method=rag,amem,clag"),
    *GROWTH,
    ("experiment=reference_corrected",),
    ("experiment=reference_authors_code",),
    ("experiment=reference_corrected_ablations",),
    ("experiment=reference_table9",),
    ("experiment=reference_table10",),
)

# Table 6 on the larger stand-in, after the others, on its own server
LARGER_BACKBONE = ("experiment=reference_table6",)

# Every run of the reference once: each sweep above that is not a part of a later one, and Table 6
GRIDS: tuple[tuple[str, ...], ...] = (
    ("experiment=reference",),
    ("experiment=reference_ablations",),
    ("experiment=reference_conventions",),
    ("experiment=reference_corrected",),
    ("experiment=reference_authors_code",),
    *GROWTH,
    ("experiment=reference_corrected_ablations",),
    ("experiment=reference_table9",),
    ("experiment=reference_table10",),
    LARGER_BACKBONE,
)


def main(argv: list[str] | None = None) -> int:
    """Run the sweeps in order; stop at the first that fails and return its exit status."""
    parser = argparse.ArgumentParser(prog="python -m clag.running.reference", description=__doc__.splitlines()[0])
    parser.add_argument("--larger-backbone", action="store_true", help="run Table 6's sweep (on its own server)")
    parser.add_argument("overrides", nargs="*", help="added to every sweep, e.g. hydra.launcher.n_jobs=2")
    args = parser.parse_args(argv)
    for sweep in [LARGER_BACKBONE] if args.larger_backbone else SWEEPS:
        print(f"== python -m clag.run -m {' '.join([*sweep, *args.overrides])}", flush=True)
        done = subprocess.run([sys.executable, "-m", "clag.run", "-m", *sweep, *args.overrides])
        if done.returncode != 0:
            return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
