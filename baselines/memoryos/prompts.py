"""MemoryOS prompts, JSON schemas and the parsers of their answers.

Each prompt paraphrases the step of the authors' code that it stands for
(github.com/BAI-LAB/MemoryOS @1d71706, ``memoryos-pypi/utils.py``,
``eval/dynamic_update.py`` and, for the answer, ``eval/main_loco_parse.py``);
the wording is ours, the task and inputs are theirs. Steps whose answer is a short text (continuity, chain summary,
profile) are free text, as the authors ask; steps whose answer has structure
(topic summaries, facts) ask for JSON so the shared tolerant parser and the
schema-constrained decoding apply.
"""

from __future__ import annotations

import re
from typing import Any

from clag.llm.json_parse import is_placeholder

SUMMARY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "topics": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "theme": {"type": "string"},
                    "keywords": {"type": "array", "items": {"type": "string"}},
                    "summary": {"type": "string"},
                },
                "required": ["theme", "keywords", "summary"],
            },
        }
    },
    "required": ["topics"],
}

FACTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "user_facts": {"type": "array", "items": {"type": "string"}},
        "assistant_facts": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["user_facts", "assistant_facts"],
}


def continuity_prompt(previous: str, current: str) -> str:
    """Does ``current`` carry on the exchange ``previous`` (authors' ``check_conversation_continuity``)?

    Worded as a yes/no about the same thread: the 0.5B stand-in answered
    "false" to every pair when asked whether the subject stays unchanged.
    """
    return (
        "Two consecutive parts of a conversation are shown. Does the second part continue the same "
        "conversation thread as the first (no switch to an unrelated topic)?\n\n"
        f"First part:\n{previous}\n\nSecond part:\n{current}\n\n"
        "Answer with one word: true if it continues, false if the topic changes."
    )


def meta_prompt(previous_meta: str, current: str) -> str:
    """Start or extend a chain's running summary (authors' ``generate_page_meta_info``).

    A chain's first page gets a plain summary request: shown a previous
    summary of "None", as the authors' prompt does, the 0.5B stand-in
    answers "None".
    """
    if not previous_meta:
        return (
            "Summarise the conversation exchange below in one or two sentences: who talks about what.\n\n"
            f"Exchange:\n{current}\n\nOutput only the summary."
        )
    return (
        "You keep a short running summary of one conversation thread.\n"
        f"Summary so far: {previous_meta}\n\nNew exchange:\n{current}\n\n"
        "Write the updated summary of the thread in one or two sentences: keep what still matters from the "
        "summary so far and add what the new exchange says. Output only the summary."
    )


def summary_prompt(text: str, max_topics: int) -> str:
    """Topic summaries of migrated pages (authors' ``gpt_generate_multi_summary``)."""
    return (
        f"Find the topics (at most {max_topics}) of the conversation excerpt below. For each topic give a short "
        "theme name, two or three keywords and a one-sentence summary.\n\n"
        f"Excerpt:\n{text}\n\n"
        'Reply with JSON: {"topics": [{"theme": "...", "keywords": ["...", "..."], "summary": "..."}]}'
    )


def profile_prompt(profile: str, conversation: str, user: str) -> str:
    """Write or rewrite the user profile from hot pages (authors' ``gpt_user_profile_analysis``).

    With no profile yet the prompt asks for a fresh one: shown an empty
    "current profile", the 0.5B stand-in copies that placeholder back.
    """
    if not profile:
        return (
            f"Write a short profile of {user} from the conversation excerpts below (with their dates): the "
            f"personality traits, interests, habits and preferences that {user} shows.\n"
            f"Output only the profile text.\n\nConversation:\n{conversation}"
        )
    return (
        f"Below are the current profile of {user} and new conversation excerpts with their dates.\n"
        f"Write the complete updated profile of {user}: keep what is still valid, add the personality traits, "
        "interests, habits and preferences the excerpts show, and let newer evidence win over older.\n"
        "Output only the profile text.\n\n"
        f"Current profile:\n{profile}\n\nConversation:\n{conversation}"
    )


def facts_prompt(conversation: str, user: str, assistant: str) -> str:
    """Facts for the user KB and the assistant traits (authors' ``gpt_knowledge_extraction``)."""
    return (
        "List the concrete facts in the conversation below: events, dates, places, people, possessions, plans "
        f"and preferences. Put facts about {user} in user_facts and facts about {assistant} in assistant_facts, "
        "each as one short sentence that names the person and gives the date when it is known. Use an empty "
        "list when there is nothing.\n\n"
        f"Conversation:\n{conversation}\n\n"
        'Reply with JSON: {"user_facts": ["..."], "assistant_facts": ["..."]}'
    )


def answer_prompt(context: str, question: str, user: str, assistant: str) -> str:
    """MemoryOS's own answer step (authors' ``eval/main_loco_parse.py`` ``generate_system_response_with_meta``).

    One prompt for every question, whatever its category: answer as
    ``assistant`` talking with ``user``, from the recent talk, the retrieved
    pages with their thread summaries and the persona, as concisely as
    possible, dates as "15 July 2023", durations in years / months / days,
    concrete entities. There is no category-5 choice: MemoryOS's LoCoMo
    answers are free text, which is why its adversarial score in the CLAG
    paper is near zero. Differences, shared by every method of the harness:
    the authors' system message is the head of the one prompt, the answer
    comes back as ``{"answer": ...}`` JSON (one parser for all methods), and
    decoding is greedy (theirs: temperature 0.7).
    """
    return (
        f"You are {assistant}, in a long conversation with {user}. Below is what you remember of it: the "
        "recent conversation, relevant past conversations (each with a summary of its thread) and what you "
        f"know about {user} and about yourself.\n\n"
        f"{context or 'Nothing yet.'}\n\n"
        f"Question about {user} or {assistant}: {question}\n\n"
        "Answer in as few words as possible: give only the content of the answer (for \"Where did the bake "
        "sale send its money?\" answer \"the animal shelter\", not a sentence). When the answer is a date or "
        "a time, give one specific date in the form \"15 July 2023\" (a specific year rather than \"last "
        "year\"); when it is a duration, give it in years, months or days. Prefer concrete entities (a named "
        "program, event, place or object) to descriptions.\n"
        'Reply with a JSON object {"answer": "..."}.'
    )


_BOOL = re.compile(r"\b(true|false|yes|no)\b", re.IGNORECASE)


def parse_bool(text: str) -> bool | None:
    """The first true/false (or yes/no) in ``text``; ``None`` when there is none."""
    match = _BOOL.search(text or "")
    return None if match is None else match.group(1).lower() in ("true", "yes")


_LABEL = re.compile(r"^(updated |new )?(meta[- ]?)?summary( so far)?\s*:\s*", re.IGNORECASE)


def clean_text(text: str) -> str:
    """Free text without surrounding whitespace, quotes or a leading "Summary:" label;
    "" for an answer that only says "none"."""
    text = _LABEL.sub("", (text or "").strip()).strip().strip("\"'`").strip()
    return "" if text.lower().rstrip(".") in ("none", "n/a") else text


def normalise_keywords(raw: Any) -> list[str]:
    """Lower-cased, de-duplicated keywords from a list or a comma-separated string.

    The authors compare keyword sets as given; lower-casing makes "Painting"
    and "painting" one keyword, which the Jaccard term of Eq. 3 intends.
    """
    values = raw.split(",") if isinstance(raw, str) else raw if isinstance(raw, list) else []
    out: list[str] = []
    for value in values:
        word = " ".join(str(value).lower().split())
        if word and not is_placeholder(word) and word not in out:
            out.append(word)
    return out


def parse_topics(value: dict[str, Any] | None, max_topics: int) -> list[tuple[str, list[str]]]:
    """``(summary, keywords)`` per usable topic of a summary answer (at most ``max_topics``)."""
    topics = value.get("topics") if value else None
    out: list[tuple[str, list[str]]] = []
    for topic in topics if isinstance(topics, list) else []:
        if not isinstance(topic, dict):
            continue
        summary = clean_text(str(topic.get("summary") or ""))
        if summary and not is_placeholder(summary):
            out.append((summary, normalise_keywords(topic.get("keywords"))))
    return out[:max_topics]


def parse_facts(raw: Any) -> list[str]:
    """Usable fact sentences: stripped of bullets, no "none", no placeholders, no repeats."""
    out: list[str] = []
    for value in raw if isinstance(raw, list) else []:
        fact = clean_text(str(value)).lstrip("-*• ").strip()
        if fact and fact.lower().rstrip(".") != "none" and not is_placeholder(fact) and fact not in out:
            out.append(fact)
    return out
