"""``make bench``: throughput benchmarks of the harness and its engines (not part of the installed package)."""
