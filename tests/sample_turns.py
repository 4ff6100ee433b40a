"""Four real-looking LoCoMo turns and a question about the first, for the method tests that drive a
memory through its protocol with a scripted model (test_query_step.py, test_method_contract.py)."""

from __future__ import annotations

from clag.types import Item, Question

ITEMS = [
    Item(f"D1:{i}", text, "1:56 pm on 8 May, 2023", speaker, "session_1")
    for i, (speaker, text) in enumerate(
        [
            ("Caroline", "I went to a LGBTQ support group yesterday."),
            ("Melanie", "That sounds great! I painted a lake at sunrise."),
            ("Caroline", "I want to become a counselor."),
            ("Melanie", "We went camping in the mountains last week."),
        ],
        start=1,
    )
]
QUESTION = Question("q1", "What did Caroline go to?", "a support group", 4, ("D1:1",))
