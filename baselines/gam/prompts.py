"""GAM's prompts, paraphrased, with the JSON schemas they ask for.

Followed: the research version of GAM (VectorSpaceLab/general-agentic-memory,
read in the fork ``nothingtosurprise/general-agentic-memory``, folder
``research/gam_research/prompts/``): ``MemoryAgent_PROMPT`` (one abstract per
page, earlier abstracts as context), ``Planning_PROMPT`` (info needs, tools
keyword / vector / page_index, their queries), ``Integrate_PROMPT`` (merge new
evidence into the running result), ``InfoCheck_PROMPT`` (is it enough?) and
``GenerateRequests_PROMPT`` (at most five follow-up retrieval questions).

What differs, and why:

* GAM asks the model to think inside ``<think>`` before the JSON. Our runs
  use thinking-off small models and JSON-constrained decoding, where a free
  text preamble is impossible, so the step is left out.
* GAM's integrate step also asks for the supporting page ids; the pages shown
  to the integrator are what we record as used (``retrieved_ids``), so the
  model is not asked to repeat them.
* The wording is ours and shorter: a 0.5B model follows a few plain lines
  better than a page of rules.

Every prompt opens with its own first sentence, which the scripted unit
tests use to tell the stages apart.
"""

from __future__ import annotations

from collections.abc import Sequence

#: The planner's tools, as GAM names them.
TOOLS = ("keyword", "vector", "page_index")

_STRINGS = {"type": "array", "items": {"type": "string"}}

# GAM's PLANNING_SCHEMA marks every key required.
PLAN_SCHEMA = {
    "type": "object",
    "properties": {
        "info_needs": _STRINGS,
        "tools": {"type": "array", "items": {"type": "string", "enum": list(TOOLS)}},
        "keyword_collection": _STRINGS,
        "vector_queries": _STRINGS,
        "page_index": {"type": "array", "items": {"type": "integer"}},
    },
    "required": ["info_needs", "tools", "keyword_collection", "vector_queries", "page_index"],
}
INTEGRATE_SCHEMA = {"type": "object", "properties": {"content": {"type": "string"}}, "required": ["content"]}
CHECK_SCHEMA = {"type": "object", "properties": {"enough": {"type": "boolean"}}, "required": ["enough"]}
REQUESTS_SCHEMA = {"type": "object", "properties": {"new_requests": _STRINGS}, "required": ["new_requests"]}

NO_MEMORY = "(no pages yet)"


def clip(text: str, max_chars: int | None) -> str:
    """``text`` cut to at most ``max_chars`` characters, marked with an ellipsis; ``None`` keeps it whole."""
    if max_chars is None or len(text) <= max_chars:
        return text
    return text[: max(0, max_chars - 3)] + "..." if max_chars >= 3 else text[:max_chars]


def render_abstracts(abstracts: Sequence[str], max_chars: int | None) -> str:
    """The page list the memo writer and the planner see: ``Page i: abstract``.

    GAM shows every earlier abstract in full, which grows without bound
    (``max_chars=None``). With a cap we keep every page visible (the planner
    needs the page numbers) and, when the list exceeds ``max_chars``, cut
    each line to an equal share of it.
    """
    if not abstracts:
        return NO_MEMORY
    lines = [f"Page {i}: {abstract}" for i, abstract in enumerate(abstracts)]
    if max_chars is not None and sum(len(line) + 1 for line in lines) > max_chars:
        share = max_chars // len(lines) - 1
        lines = [clip(line, share) for line in lines]
    return "\n".join(lines)


def memo_prompt(earlier: str, page: str) -> str:
    return (
        "You write the long-term memory abstract of one new page.\n\n"
        "EARLIER ABSTRACTS (context only: use them to keep names and terms consistent, "
        "but do not add facts that the new page does not state):\n"
        f"{earlier}\n\n"
        f"NEW PAGE:\n{page}\n\n"
        "Write one self-contained, factual paragraph that keeps every important detail of the new page: "
        "people, events, plans, decisions, names, dates, numbers and places. "
        "No bullet points, headings, advice or questions, and no phrases such as 'the conversation is about'. "
        "Reply with the paragraph only."
    )


def plan_prompt(request: str, abstracts: str) -> str:
    return (
        "You plan retrieval over a paged memory to collect what is needed to answer a question. "
        "Do not answer it.\n\n"
        f"QUESTION:\n{request}\n\n"
        f"MEMORY (one abstract per page):\n{abstracts}\n\n"
        "First name the facts the question needs (info_needs). Then choose one or more tools:\n"
        '- "keyword": BM25 search; give short keyword phrases that literally occur in the text '
        "(names, terms, attributes).\n"
        '- "vector": semantic search; give short natural-language queries that spell out the entities.\n'
        '- "page_index": read whole pages whose abstract above is clearly relevant; give at most 5 page '
        "numbers from the list, never guessed ones.\n"
        "Make every query specific and different from the others.\n\n"
        "Reply with one JSON object with exactly these keys: "
        '"info_needs" (list of strings), "tools" (list drawn from "keyword", "vector", "page_index"), '
        '"keyword_collection" (list of strings), "vector_queries" (list of strings), '
        '"page_index" (list of integers).'
    )


def integrate_prompt(question: str, evidence: str, summary: str) -> str:
    return (
        "You merge newly retrieved evidence into a running factual summary for a question. "
        "The summary is not the answer: it gathers the facts someone needs to answer the question later.\n\n"
        f"QUESTION:\n{question}\n\n"
        f"NEW EVIDENCE (retrieved pages):\n{evidence}\n\n"
        f"CURRENT SUMMARY (may be empty or incomplete):\n{summary or '(empty)'}\n\n"
        "Keep what the current summary says about the question, add every relevant fact from the new "
        "evidence (names, dates, numbers, events, places) and drop what is off-topic. Use only facts stated "
        "in the evidence or the summary; no guesses and no remarks about where a fact came from.\n\n"
        'Reply with one JSON object with one key, "content": the updated summary as a string.'
    )


def check_prompt(question: str, summary: str) -> str:
    return (
        "You judge whether a summary already holds everything needed to answer a question fully and "
        "specifically. Do not answer the question.\n\n"
        f"QUESTION:\n{question}\n\n"
        f"SUMMARY:\n{summary or '(empty)'}\n\n"
        "Work out which pieces of information the question needs and check each against the summary.\n\n"
        'Reply with one JSON object with one key, "enough": true if every piece is stated clearly, '
        "otherwise false."
    )


def requests_prompt(question: str, summary: str) -> str:
    return (
        "You write follow-up retrieval questions for information that a summary still lacks.\n\n"
        f"QUESTION:\n{question}\n\n"
        f"SUMMARY:\n{summary or '(empty)'}\n\n"
        "Find what the question needs that the summary does not state clearly. Write one standalone "
        "retrieval question per missing piece, most important first, at most 5. Name the concrete people, "
        "things and events involved, and ask for facts that a search can find, not for analysis.\n\n"
        'Reply with one JSON object with one key, "new_requests": a list of question strings.'
    )
