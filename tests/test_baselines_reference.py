"""The reference baselines: full context (cut from the oldest end at the budget) and no memory."""

from __future__ import annotations

import pytest

from baselines.reference import FullContextMemory, NoMemory, render_items
from clag.memory.base import MemorySystem
from clag.types import Item, Question

QUESTION = Question(id="q1", text="What did Caroline paint?", answer="a sunrise", category=4)


def items() -> list[Item]:
    """Six turns over two sessions; each rendered line is 'Speaker Xsays : turn N ...' (the authors' content)."""
    out = []
    for i in range(6):
        session, date = ("session_1", "8 May, 2023") if i < 3 else ("session_2", "25 May, 2023")
        out.append(
            Item(
                id=f"D{1 + i // 3}:{i % 3 + 1}",
                text=f"turn {i} " + "x" * 30,
                timestamp=date,
                speaker="Caroline" if i % 2 else "Melanie",
                session=session,
            )
        )
    return out


def test_render_items_dates_each_session_in_order():
    text = render_items(items())
    lines = text.splitlines()
    assert lines[0] == "DATE: 8 May, 2023" and lines[4] == "DATE: 25 May, 2023"
    assert lines[1].startswith("Speaker Melaniesays : turn 0") and lines[-1].startswith("Speaker Caroline")
    assert len(lines) == 8  # 6 turns + 2 date lines


def test_full_context_fits_everything_under_a_large_budget():
    memory = FullContextMemory(budget_tokens=10_000)
    memory.add_many(items())
    context = memory.retrieve(QUESTION)
    assert context.text == render_items(items())
    assert context.source_ids == [item.id for item in items()]
    assert context.telemetry["truncated"] is False and context.telemetry["items_dropped"] == 0


@pytest.mark.parametrize("budget", [20, 40, 45, 60, 75])
def test_full_context_is_cut_from_the_oldest_end_at_the_budget(budget):
    memory = FullContextMemory(budget_tokens=budget, chars_per_token=4)
    memory.add_many(items())
    context = memory.retrieve(QUESTION)
    kept = context.telemetry["items_kept"]
    assert memory.tokens(context.text) <= budget
    assert context.telemetry["context_tokens_est"] == memory.tokens(context.text)
    # The longest suffix that fits: one older item more would not.
    assert context.text == render_items(items()[6 - kept :])
    if kept < 6:
        assert memory.tokens(render_items(items()[6 - kept - 1 :])) > budget
        assert context.telemetry["truncated"] and context.telemetry["items_dropped"] == 6 - kept
    assert context.source_ids == [item.id for item in items()[6 - kept :]]
    if kept:
        assert context.text.startswith("DATE: ")  # a session cut in the middle keeps its date line
        assert context.source_ids[-1] == "D2:3"  # the newest turn always survives


def test_full_context_is_the_same_text_for_every_question():
    """One text per episode, so a serving engine's prefix cache reuses it across the episode's questions."""
    memory = FullContextMemory(budget_tokens=50)
    memory.add_many(items())
    other = Question(id="q2", text="When?", answer="May", category=2)
    assert memory.retrieve(QUESTION).text == memory.retrieve(other).text
    memory.add(Item(id="D2:4", text="a late turn", timestamp="25 May, 2023", speaker="Melanie"))
    assert memory.retrieve(QUESTION).source_ids[-1] == "D2:4"  # adding an item refits


def test_full_context_and_no_memory_round_trip_and_follow_the_protocol(tmp_path):
    for memory in (FullContextMemory(budget_tokens=45), NoMemory()):
        assert isinstance(memory, MemorySystem)
        memory.add_many(items())
        memory.finish_ingestion()
        before = memory.retrieve(QUESTION)
        memory.save(tmp_path / type(memory).__name__)
        fresh = type(memory)(budget_tokens=45) if isinstance(memory, FullContextMemory) else NoMemory()
        fresh.load(tmp_path / type(memory).__name__)
        assert fresh.retrieve(QUESTION).text == before.text and fresh.describe() == memory.describe()
    empty = NoMemory()
    empty.add_many(items())
    context = empty.retrieve(QUESTION)
    assert context.text == "" and context.source_ids == [] and context.telemetry["items_total"] == 6


def test_a_bad_budget_is_one_clear_error():
    with pytest.raises(ValueError, match="budget_tokens"):
        FullContextMemory(budget_tokens=0)
