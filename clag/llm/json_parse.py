"""One tolerant parser for the JSON that small models write.

Small models return broken JSON (missing braces, trailing prose, code
fences, single quotes, truncated output) and, even when the JSON is valid,
echo the prompt's placeholders ("keyword1", "tag_1", "your one-sentence
summary here"). Both count as failures: the caller retries once and then
falls back, and the failure rate is reported per stage.

Repairs that keep the model's meaning are applied instead of failing:
``json_repair`` for the syntax, a digit string for an integer field, a
number for a string field, a comma-separated string for a list of strings,
and placeholder items dropped from a list that also holds real ones.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import json_repair

_PLACEHOLDER = re.compile(
    r"^(keyword|tag|item|topic|category|example|value|string)[ _-]?\d+$"
    r"|\b(your|a|the) (one[- ]sentence |short |brief )?(summary|answer|description|keywords?|tags?|context)"
    r" (here|goes here)\b"
    r"|^\.\.\.$|^<.*>$",
    re.IGNORECASE,
)
_LIST_SEPARATOR = re.compile(r"[,;]")
_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")


def strip_think(text: str) -> str:
    """Drop ``<think>...</think>`` blocks (and a cut-off one) from a completion.

    Every backend applies it (Qwen3 may think even with thinking off), and
    the parser again, for text that comes from elsewhere.
    """
    return _THINK.sub("", text or "").strip()


def is_placeholder(value: Any) -> bool:
    """True for empty strings and echoed template placeholders.

    A string listing placeholders only ("keyword1, keyword2, keyword3", the
    keyword prompt's own example) is one too: a string field that holds a
    list is checked part by part, as a list field would be.
    """
    if isinstance(value, str):
        text = value.strip()
        if not text or _PLACEHOLDER.search(text):
            return True
        parts = [part.strip() for part in _LIST_SEPARATOR.split(text)]
        return len(parts) > 1 and all(not part or _PLACEHOLDER.search(part) for part in parts)
    if isinstance(value, list):
        return bool(value) and all(is_placeholder(v) for v in value)
    return False


def _echoed(field: Any, spec: Mapping[str, Any]) -> bool:
    """A placeholder echo, unless the schema lists the value in an ``enum`` (then it is an answer)."""
    if isinstance(field, list):
        items = spec.get("items", {})
        return bool(field) and all(_echoed(item, items) for item in field)
    return field not in spec.get("enum", ()) and is_placeholder(field)


def _coerce(field: Any, spec: Mapping[str, Any]) -> Any:
    """``field`` converted to the declared type where that keeps its meaning, else unchanged."""
    kind = spec.get("type")
    if kind == "integer" and isinstance(field, str) and re.fullmatch(r"-?\d+", field.strip()):
        return int(field.strip())
    if kind == "number" and isinstance(field, str) and _NUMBER.match(field.strip()):
        return float(field.strip())
    if kind == "string" and isinstance(field, (int, float)) and not isinstance(field, bool):
        return str(field)
    if kind == "array" and spec.get("items", {}).get("type") == "string":
        if isinstance(field, str):
            field = [part.strip() for part in _LIST_SEPARATOR.split(field) if part.strip()]
        if isinstance(field, list):
            real = [item for item in field if not _echoed(item, spec["items"])]
            return real if real else field
    return field


def _is_type(field: Any, kind: str | None) -> bool:
    if kind is None:
        return True
    if isinstance(field, bool):
        return kind == "boolean"
    expected = {"string": str, "array": list, "object": dict, "integer": int, "number": (int, float), "boolean": bool}
    return isinstance(field, expected.get(kind, object))


def _validate(value: dict[str, Any], schema: Mapping[str, Any], accept_placeholders: bool) -> dict[str, Any] | None:
    properties = schema.get("properties", {})
    for name, spec in properties.items():
        if name in value:
            value[name] = _coerce(value[name], spec)
    for name in schema.get("required", []):
        if name not in value:
            return None
        field = value[name]
        if not _is_type(field, properties.get(name, {}).get("type")):
            return None
        if not accept_placeholders and isinstance(field, (str, list)) and _echoed(field, properties.get(name, {})):
            return None
    return value


def parse_json_object(
    text: str, schema: Mapping[str, Any] | None = None, accept_placeholders: bool = False
) -> dict[str, Any] | None:
    """Parse ``text`` into a dict that satisfies ``schema``, or ``None``.

    Repair uses ``json_repair``. When the text holds several JSON values (an
    array of objects, an object followed by prose), the first object that
    satisfies the schema wins. With a schema, every required key must be
    present with the declared type (after the repairs listed in the module
    docstring); no required string may be empty or a placeholder, and no
    required list may hold placeholders only (an empty list is an answer,
    e.g. no cluster picked). ``accept_placeholders`` drops that last check, as
    the authors' code takes whatever the model returns.
    """
    text = strip_think(text)
    try:
        value = json_repair.loads(text)
    except Exception:  # json_repair raises on pathological input only
        return None
    if isinstance(value, dict):
        candidates = [value]
    elif isinstance(value, list):
        candidates = [v for v in value if isinstance(v, dict)]
    else:
        candidates = []
    for candidate in candidates:
        result = _validate(candidate, schema, accept_placeholders) if schema else candidate
        if result is not None:
            return result
    return None
