"""Paper tables: the paper's own numbers and the rendered comparisons."""
