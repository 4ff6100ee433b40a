"""GAM baseline: a page memorizer and a deep-research retriever (see :mod:`baselines.gam.memory`)."""

from baselines.gam.memory import GamMemory

__all__ = ["GamMemory"]
