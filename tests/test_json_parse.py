"""The tolerant JSON parser against the ways small models break JSON."""

from __future__ import annotations

import pytest

from clag.answer import KEYWORDS_SCHEMA, keywords_prompt
from clag.llm.json_parse import is_placeholder, parse_json_object
from clag.memory.agentic import NOTE_SCHEMA

NOTE = NOTE_SCHEMA  # the note-construction schema the agentic core really uses
PICK = {"type": "object", "properties": {"choice": {"type": "integer"}}, "required": ["choice"]}
ANSWER = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


@pytest.mark.parametrize(
    "text",
    [
        '```json\n{"answer": "Paris"}\n```',  # code fence
        '```\n{"answer": "Paris"}\n```',  # fence without language
        'Sure! Here is the JSON: {"answer": "Paris"} Hope this helps.',  # prose around
        '{"answer": "Paris"}\n\nExplanation: the {answer} comes from the context.',  # trailing prose with braces
        "{'answer': 'Paris'}",  # single quotes
        '{"answer": "Paris",}',  # trailing comma
        '{"answer": "Paris"',  # missing brace
        '[{"answer": "Paris"}]',  # array wrapping the object
        '<think>The user wants a city.</think>{"answer": "Paris"}',  # a think block
    ],
)
def test_repairs_broken_syntax(text: str) -> None:
    assert parse_json_object(text, ANSWER) == {"answer": "Paris"}


def test_truncated_json_keeps_what_was_written() -> None:
    value = parse_json_object(
        '{"keywords": ["trip", "Paris"], "tags": ["travel"], "context": "Caroline plans a tri', NOTE
    )
    assert value == {"keywords": ["trip", "Paris"], "tags": ["travel"], "context": "Caroline plans a tri"}


def test_truncated_before_a_required_key_fails() -> None:
    assert parse_json_object('{"keywords": ["trip", "Paris"], "context": "Caroline pl', NOTE) is None


def test_first_object_that_fits_the_schema_wins() -> None:
    text = '{"note": "ignore me"}\n{"answer": "Paris"}'
    assert parse_json_object(text, ANSWER) == {"answer": "Paris"}
    assert parse_json_object(text) == {"note": "ignore me"}  # without a schema: the first object


@pytest.mark.parametrize(
    "text",
    [
        '{"keywords": ["keyword1", "keyword2"], "context": "A trip to Paris.", "tags": ["travel"]}',
        '{"keywords": ["Paris"], "context": "A trip to Paris.", "tags": ["tag_1", "tag_2"]}',
        '{"keywords": ["Paris"], "context": "Your one-sentence summary here", "tags": ["travel"]}',
        '{"keywords": ["Paris"], "context": "", "tags": ["travel"]}',
        '{"keywords": ["Paris"], "context": "   ", "tags": ["travel"]}',
        '{"keywords": ["Paris"], "context": "...", "tags": ["travel"]}',
        '{"keywords": ["Paris"], "context": "<one sentence>", "tags": ["travel"]}',
    ],
)
def test_placeholder_echoes_and_empty_values_fail(text: str) -> None:
    assert parse_json_object(text, NOTE) is None


def test_an_empty_required_list_is_an_answer() -> None:
    """Zero picked clusters is a valid pick; only echoed placeholders fail a list."""
    pick = {"type": "object", "properties": {"clusters": {"type": "array"}}, "required": ["clusters"]}
    assert parse_json_object('{"clusters": []}', pick) == {"clusters": []}


def test_placeholder_items_are_dropped_when_real_ones_remain() -> None:
    value = parse_json_object('{"keywords": ["Paris", "keyword2", ""], "context": "A trip.", "tags": ["travel"]}', NOTE)
    assert value is not None and value["keywords"] == ["Paris"]


def test_enum_members_are_answers_even_when_they_look_like_placeholders() -> None:
    route = {
        "type": "object",
        "properties": {
            "choice": {"type": "string", "enum": ["topic_1", "topic_2"]},
            "also": {"type": "array", "items": {"type": "string", "enum": ["topic_1", "topic_2"]}},
        },
        "required": ["choice", "also"],
    }
    assert parse_json_object('{"choice": "topic_2", "also": ["topic_1", "tag_1"]}', route) == {
        "choice": "topic_2",
        "also": ["topic_1"],
    }
    assert parse_json_object('{"choice": "tag_1", "also": ["topic_1"]}', route) is None


def test_comma_separated_string_becomes_a_list() -> None:
    value = parse_json_object('{"keywords": "Paris, trip; museum", "context": "A trip.", "tags": ["travel"]}', NOTE)
    assert value is not None and value["keywords"] == ["Paris", "trip", "museum"]


@pytest.mark.parametrize(
    ("text", "expected"), [('{"choice": "2"}', 2), ('{"choice": " -1 "}', -1), ('{"choice": 3}', 3)]
)
def test_integer_fields_accept_digit_strings(text: str, expected: int) -> None:
    value = parse_json_object(text, PICK)
    assert value == {"choice": expected} and isinstance(value["choice"], int)


@pytest.mark.parametrize("text", ['{"choice": "two"}', '{"choice": true}', '{"choice": 2.5}', '{"choice": null}'])
def test_integer_fields_reject_other_values(text: str) -> None:
    assert parse_json_object(text, PICK) is None


def test_number_to_string_and_string_to_number() -> None:
    assert parse_json_object('{"answer": 1998}', ANSWER) == {"answer": "1998"}
    score = {"type": "object", "properties": {"score": {"type": "number"}}, "required": ["score"]}
    assert parse_json_object('{"score": "0.75"}', score) == {"score": 0.75}


@pytest.mark.parametrize("text", ["", "Paris", "I cannot answer that.", "[1, 2, 3]", "null", "42"])
def test_non_objects_give_none_never_raise(text: str) -> None:
    assert parse_json_object(text, ANSWER) is None


def test_missing_required_key_fails_but_extra_keys_pass() -> None:
    assert parse_json_object('{"reply": "Paris"}', ANSWER) is None
    assert parse_json_object('{"answer": "Paris", "reason": "capital"}', ANSWER) == {
        "answer": "Paris",
        "reason": "capital",
    }


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("keyword1", True),
        ("Keyword 2", True),
        ("tag_1", True),
        ("topic-3", True),
        ("keyword1, keyword2, keyword3", True),  # the keyword prompt's own example
        ("tag_1; tag_2", True),
        ("Paris, keyword2", False),  # a real part keeps the string
        ("your one-sentence summary here", True),
        ("The short description goes here", True),
        ("", True),
        ("  ", True),
        ("...", True),
        ("<keyword>", True),
        (["tag_1", "tag_2"], True),
        ([], False),  # an empty list can be an answer (no cluster picked)
        ("Paris", False),
        ("tag", False),
        ("1, 2, 3", False),
        ("Caroline went to a support group.", False),
        (["tag_1", "travel"], False),
        (3, False),
    ],
)
def test_is_placeholder(value: object, expected: bool) -> None:
    assert is_placeholder(value) is expected


def test_the_keyword_prompts_own_example_is_rejected() -> None:
    """The example line of ``keywords_prompt`` echoed back is a failure, not a query."""
    example = keywords_prompt("Where did Caroline go?").rsplit("\n", 1)[-1]
    assert parse_json_object(example, KEYWORDS_SCHEMA) is None
    assert parse_json_object('{"keywords": "Caroline, support group"}', KEYWORDS_SCHEMA) == {
        "keywords": "Caroline, support group"
    }
