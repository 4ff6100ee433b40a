"""Agreement between two raters on the same items: Cohen's kappa.

Used for the two LLM-judge prompts (lenient vs strict, ``clag.metrics.judge``): raw
agreement flatters two raters that both say "correct" most of the time, so
kappa discounts the agreement their label frequencies alone would produce.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence


def cohen_kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> dict:
    """Cohen's kappa of two label sequences over the same items.

    kappa = (p_o - p_e) / (1 - p_e), where p_o is the share of items with the
    same label and p_e the agreement expected by chance from each rater's
    label frequencies (Cohen 1960; as ``sklearn.metrics.cohen_kappa_score``
    without weights).

    Returns:
        ``{"kappa", "agreement", "n"}``; ``kappa`` is None when it is
        undefined: no items, or chance agreement of 1 (both raters gave one
        and the same label to every item).

    Raises:
        ValueError: The sequences differ in length.
    """
    if len(a) != len(b):
        raise ValueError(f"kappa needs two labels per item: {len(a)} vs {len(b)}")
    n = len(a)
    if not n:
        return {"kappa": None, "agreement": None, "n": 0}
    observed = sum(x == y for x, y in zip(a, b)) / n
    count_a, count_b = Counter(a), Counter(b)
    expected = sum(count_a[label] * count_b[label] for label in count_a) / (n * n)
    kappa = None if expected >= 1.0 else (observed - expected) / (1.0 - expected)
    return {"kappa": kappa, "agreement": observed, "n": n}
