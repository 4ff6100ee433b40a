"""One tolerant parser for the JSON that small models write.

Small models return broken JSON (missing braces, trailing prose, code
fences) and, even when the JSON is valid, echo the prompt's placeholders
("keyword1", "tag_1", "your one-sentence summary here"). Both count as
failures: the caller retries once and then falls back, and the failure
rate is reported per stage.
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


def is_placeholder(value: Any) -> bool:
    """True for empty strings and echoed template placeholders."""
    if isinstance(value, str):
        text = value.strip()
        return not text or bool(_PLACEHOLDER.search(text))
    if isinstance(value, list):
        return bool(value) and all(is_placeholder(v) for v in value)
    return False


_TYPES = {"string": str, "array": list, "object": dict, "integer": int, "number": (int, float), "boolean": bool}


def parse_json_object(text: str, schema: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """Parse ``text`` into a dict that satisfies ``schema``, or ``None``.

    Repair uses ``json_repair``. With a schema, every required key must be
    present with the declared type (an integer given as a digit string is
    accepted) and no required string/array may be empty or a placeholder.
    """
    text = re.sub(r"<think>.*?</think>", "", text or "", flags=re.DOTALL).strip()
    try:
        value = json_repair.loads(text)
    except Exception:  # json_repair raises on pathological input only
        return None
    if isinstance(value, list):
        value = next((v for v in value if isinstance(v, dict)), None)
    if not isinstance(value, dict):
        return None
    if not schema:
        return value
    properties = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in value:
            return None
        expected = _TYPES.get(properties.get(name, {}).get("type", ""), object)
        field = value[name]
        if expected is int and isinstance(field, str) and field.strip().lstrip("-").isdigit():
            value[name] = field = int(field.strip())
        if not isinstance(field, expected) or isinstance(field, bool) and expected is not bool:
            return None
        if isinstance(field, (str, list)) and is_placeholder(field):
            return None
    return value
