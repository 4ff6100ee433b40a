"""`make bench` = `python -m benchmarks` (see benchmarks/throughput.py and benchmarks/engines.py).

    python -m benchmarks                      # --quick: sections 1-9, tables in results/bench/quick/
    python -m benchmarks --full               # the demo slice, tables in results/bench/full/
    python -m benchmarks --sections engines   # only the engine rows (vLLM against transformers)

Run it alone on the machine (it loads the real model and starts a vLLM server).
"""

from benchmarks.throughput import main

if __name__ == "__main__":
    main()
