"""`make bench`: the throughput benchmark of issue #8 (see clag/bench.py).

    python scripts/bench.py            # --quick: ~15 min on a 2-core CPU, tables in results/bench/quick/
    python scripts/bench.py --full     # the demo slice, tables in results/bench/full/

Run it alone on the machine (it loads the real model): `flock /tmp/clag-model.lock python scripts/bench.py`.
"""

from clag.bench import main

if __name__ == "__main__":
    main()
