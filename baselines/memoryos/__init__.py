"""MemoryOS baseline: short-, mid- and long-term tiers with heat-based promotion.

See :mod:`baselines.memoryos.system` for the design and what follows the
authors' code (github.com/BAI-LAB/MemoryOS) and paper.
"""

from baselines.memoryos.system import MemoryOSMemory

__all__ = ["MemoryOSMemory"]
