"""The one answerer and the one query step (question to keywords), shared by every method.

Prompts follow the authors' evaluation loop (dmis-lab/CLAG ``test_CLAG.py``,
itself A-mem's ``test_advanced.py``): a category-specific prompt per LoCoMo
category, a short-phrase prompt for HotpotQA and BioASQ factoid questions
(category 4), a semicolon-list prompt for BioASQ list questions (category
6), and for LoCoMo category 5 the two-option question ("Not mentioned in the
conversation" or the trap answer, in a seeded random order). Every answer is
requested as ``{"answer": ...}`` JSON, as the authors constrain it. The
prompt text is paraphrased to our layout, not copied; what matters for
faithfulness (the instructions per category, the two options, the JSON
answer) is kept.

One named difference, a parameter (``answer.json_instruction``): our prompts
end with a sentence asking for the JSON object; the authors' end at "Short
answer:" and leave the JSON to the schema-constrained decoding alone.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from clag.llm.client import LLMClient
from clag.types import Question

ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}
KEYWORDS_SCHEMA = {
    "type": "object",
    "properties": {"keywords": {"type": "string"}},
    "required": ["keywords"],
}
NOT_MENTIONED = "Not mentioned in the conversation"

_JSON_TAIL = '\nReply with a JSON object {"answer": "..."}.'


def keywords_prompt(question: str) -> str:
    return (
        "Given the following question, generate several keywords, using 'commas' as the separator.\n\n"
        f"Question: {question}\n\n"
        'Format your response as a JSON object with a "keywords" field containing the selected text.\n\n'
        'Example response format:\n{"keywords": "keyword1, keyword2, keyword3"}'
    )


def question_keywords(llm: LLMClient, questions: Sequence[str]) -> list[str]:
    """The authors' query step: the SLM turns each question into keywords.

    On unusable JSON the question itself is the query (the authors fall back
    to the raw response text; the question is the cleaner equivalent).
    """
    parsed = llm.generate_json([keywords_prompt(q) for q in questions], "keywords", KEYWORDS_SCHEMA)
    return [p["keywords"] if p else q for p, q in zip(parsed, questions)]


def timed_keywords(llm: LLMClient, question: str) -> tuple[str, float]:
    """The query step of every method that asks for keywords: the keywords and that call's wall time in ms.

    Methods put the time in ``timings_ms["keywords"]`` and nothing else in it
    (query embedding and search belong to their own stages), because the
    runner subtracts it from retrieval latency, as the authors time retrieval;
    Table 2 compares methods on that basis.
    """
    start = time.perf_counter()
    keywords = question_keywords(llm, [question])[0]
    return keywords, (time.perf_counter() - start) * 1000


def answer_prompt(question: Question, context: str, seed: int = 0, json_instruction: bool = True) -> str:
    """The authors' category-specific answer prompt; ``json_instruction`` appends our request for the JSON
    object (the authors rely on the schema alone)."""
    return _prompt_body(question, context, seed) + (_JSON_TAIL if json_instruction else "")


def _prompt_body(question: Question, context: str, seed: int) -> str:
    text = question.text
    if question.category == 5:
        options = [NOT_MENTIONED, question.reference]
        random.Random(f"{seed}:{question.id}").shuffle(options)
        return (
            f"Based on the context: {context}, answer the following question. {text}\n\n"
            f"Select the correct answer: {options[0]} or {options[1]}  Short answer:"
        )
    if question.category == 2:
        return (
            f"Based on the context: {context}, answer the following question. Use DATE of CONVERSATION "
            "to answer with an approximate date.\nPlease generate the shortest possible answer, using "
            f"words from the conversation where possible, and avoid using any subjects.\n\nQuestion: {text} "
            "Short answer:"
        )
    if question.category == 6:
        return (
            "Based on the context below, answer the question.\n\nThis is a LIST question:\n"
            "- Extract ALL distinct answer items that are supported by the context.\n"
            "- Output the answers as a semicolon-separated list using EXACT words from the context "
            "whenever possible.\n- Use this exact format: item1 ; item2 ; item3\n"
            "- Do NOT add numbering, commas, bullet points, or extra text.\n"
            "- If there is only one item, output just that single item (no extra words).\n\n"
            f"Context:\n{context}\n\nQuestion: {text}\nAnswer:"
        )
    return (
        f"Based on the context: {context}, write an answer in the form of a short phrase for the "
        "following question. Answer with exact words from the context whenever possible.\n\n"
        f"Question: {text} Short answer:"
    )


@dataclass(frozen=True)
class Reply:
    """One answer: its text, and whether the model's reply was the JSON asked for (False: the raw
    reply is the answer, as the authors keep it)."""

    text: str
    parsed: bool


@dataclass
class Answerer:
    """Answers batches of questions from their contexts with one prompt family.

    Args:
        llm: The shared client; answers are the ``answer`` stage.
        seed: Seeds the category-5 option order (the authors use ``random``
            unseeded; we fix it so runs repeat).
        adversarial_temperature: The authors sample category 5 at
            ``temperature_c5`` = 0.5; ``None`` keeps the stage's setting.
        json_instruction: End the shared prompts with our request for the JSON
            object (False: the authors' prompts, the schema alone asks for it).
    """

    llm: LLMClient
    seed: int = 0
    adversarial_temperature: float | None = None
    json_instruction: bool = True

    def answer(self, questions: Sequence[Question], contexts: Sequence[str],
               own_prompts: Sequence[str | None] | None = None) -> list[Reply]:
        """One reply per question; unparseable JSON falls back to the raw text.

        ``own_prompts`` (from :attr:`clag.types.Context.answer_prompt`) replaces
        the shared prompt where a method brings its own answer step.
        """
        own = own_prompts or [None] * len(questions)
        prompts = [
            p or answer_prompt(q, c, self.seed, self.json_instruction) for q, c, p in zip(questions, contexts, own)
        ]
        adversarial = [i for i, q in enumerate(questions) if q.category == 5]
        groups = [[i for i in range(len(questions)) if i not in set(adversarial)], adversarial]
        overrides = [{}, {}]
        if self.adversarial_temperature is not None:
            overrides[1] = {"temperature": self.adversarial_temperature, "seed": self.seed}
        replies = [Reply("", False)] * len(questions)
        for indices, extra in zip(groups, overrides):
            if not indices:
                continue
            batch = [prompts[i] for i in indices]
            results = self.llm.generate_json_with_text(batch, "answer", ANSWER_SCHEMA, **extra)
            for i, (value, text) in zip(indices, results):
                # The authors keep the raw response when the JSON cannot be parsed.
                replies[i] = Reply(str(value["answer"]).strip(), True) if value else Reply(text.strip(), False)
        return replies
