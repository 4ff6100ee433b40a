"""GAM (General Agentic Memory via Deep Research, arXiv 2511.18423) as a MemorySystem.

Followed: GAM's research code (VectorSpaceLab/general-agentic-memory, read in
the fork ``nothingtosurprise/general-agentic-memory``, ``research/``):
``MemoryAgent.memorize`` (one abstract per page, written with the earlier
abstracts in view, the page stored whole), ``ResearchAgent.research`` (up to
``max_iters`` = 3 rounds of plan -> search -> integrate -> reflect; the
planner works on the latest request, integration and reflection on the
original question; the integrated result is the memory handed to the
answerer) and ``eval/locomo_test.py`` / ``eval/hotpotqa_test.py`` (one
LoCoMo session per page; HotpotQA text cut into pages of 2048 tokens).

Ingestion. ``add`` buffers items into the open page. A page closes when the
item's session changes or when the next item would push the page past
``page_tokens``, counted as characters / 4 (the estimate GAM's own code
falls back to). LoCoMo sessions are at most ~6,200 characters (~1,550
estimated tokens), so with the default budget every LoCoMo page is exactly
one session, as in GAM; HotpotQA and BioASQ (one session per sample) are
packed by the budget. Each closed page costs one ``memo`` call that sees the
earlier abstracts, cut to ``abstracts_max_chars`` in total.

Research, per question. Each round: ``plan`` (JSON plan of tools and
queries), search (BM25 over the joined keywords, dense over every vector
query, page-id lookup; ``top_k_per_tool`` each; hits merged by page, best
score first), ``integrate`` (the hit pages, in that order and cut to
``evidence_max_chars``, merged into the running summary, itself kept to
``summary_max_chars``), then ``reflect``: an "enough?" check and, if not
enough, follow-up questions that become the next round's request. That is
GAM's two-call reflection. GAM also reflects after the last round and then
discards the decision; we skip those two calls (the output is identical).

LLM calls per question are therefore at most ``4 * max_iters - 2`` (plan
and integrate every round, check and follow-ups between rounds; with
``integrate: false`` at most ``3 * max_iters - 2``), and at most twice that
many backend calls, since every JSON call may be retried once by the client.
``call_bound`` reports both.

Fallbacks, each counted in the question's telemetry:

* plan JSON unusable -> the current request itself is the keyword and the
  vector query (GAM would search nothing); a valid plan without any usable
  query is treated the same (``plan_empty``);
* integrate JSON unusable -> the new evidence is appended to the summary
  (GAM keeps the previous result, which for a small model is often empty,
  leaving the answerer nothing);
* reflect JSON unusable, or no follow-up questions -> stop. GAM would
  re-plan the same request, which under greedy decoding repeats the round.

``integrate: false`` is GAM's ``_search_no_integrate`` path: the round's
formatted hits become the result, with no integrate call. Table 16 reports
GAM contexts of ~17k characters, more than an integrated summary reaches.

``retrieved_ids`` are the item ids of the pages shown to the integrator, in
the order they were first read (rank order within a round).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from baselines.gam.prompts import (
    CHECK_SCHEMA,
    INTEGRATE_SCHEMA,
    PLAN_SCHEMA,
    REQUESTS_SCHEMA,
    check_prompt,
    clip,
    integrate_prompt,
    memo_prompt,
    plan_prompt,
    render_abstracts,
    requests_prompt,
)
from baselines.gam.search import PageIndex
from clag.embed import Embedder
from clag.llm.client import LLMClient
from clag.llm.json_parse import is_placeholder
from clag.memory.base import MemoryBase
from clag.types import Context, Item, Question

log = logging.getLogger(__name__)

#: GAM's rough token estimate (``hotpotqa_test._fallback_char_split``, debug prints).
CHARS_PER_TOKEN = 4
#: GAM's fallback abstract when the memory call fails: the page's first 200 characters.
FALLBACK_ABSTRACT_CHARS = 200
#: A page cut to fewer characters than this is left out of the evidence (and not counted as read).
MIN_EVIDENCE_CHARS = 200
#: GAM's follow-up generator writes at most five questions.
MAX_FOLLOW_UPS = 5
#: GAM's completion caps: memory generator max_tokens=256, research generator max_tokens=2048.
DEFAULT_MAX_NEW_TOKENS = {"memo": 256, "plan": 2048, "integrate": 2048, "reflect": 2048}


@dataclass
class Page:
    """A closed page: its items rendered whole, and the memo written for it."""

    index: int
    item_ids: list[str]
    text: str
    abstract: str


@dataclass
class Plan:
    """The tools and queries of one research round."""

    keywords: list[str] = field(default_factory=list)
    vector_queries: list[str] = field(default_factory=list)
    page_ids: list[int] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], pages: int, limit: int) -> Plan:
        """Keep only the tools the model chose and the inputs that can run."""
        tools = {str(tool).strip().lower() for tool in data["tools"]}
        plan = cls()
        if "keyword" in tools:
            plan.keywords = _strings(data["keyword_collection"])
        if "vector" in tools:
            plan.vector_queries = _strings(data["vector_queries"])
        if "page_index" in tools:
            ids = [int(v) for v in data["page_index"] if str(v).strip().isdigit() and 0 <= int(v) < pages]
            plan.page_ids = list(dict.fromkeys(ids))[:limit]
        return plan

    @classmethod
    def from_request(cls, request: str) -> Plan:
        """The fallback plan: the request itself as keyword and vector query."""
        return cls(keywords=[request], vector_queries=[request])

    def empty(self) -> bool:
        return not (self.keywords or self.vector_queries or self.page_ids)


def _strings(values: Sequence[Any]) -> list[str]:
    return [v.strip() for v in values if isinstance(v, str) and not is_placeholder(v)]


@dataclass
class _Trace:
    """Everything one question's research accumulates."""

    summary: str = ""
    pages_read: list[int] = field(default_factory=list)
    timings_ms: Counter = field(default_factory=Counter)
    tool_calls: Counter = field(default_factory=Counter)
    fallbacks: Counter = field(default_factory=Counter)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    llm_calls: int = 0
    stop_reason: str = "max_iters"

    def timed(self, stage: str, start: float) -> None:
        self.timings_ms[stage] += (time.perf_counter() - start) * 1000


class GamMemory(MemoryBase):
    """Pages with memos at ingestion, a plan-search-integrate-reflect loop per question.

    Args:
        llm: The shared client; stages ``memo``, ``plan``, ``integrate``, ``reflect``.
        embedder: The shared sentence embedder (dense search over pages).
        page_tokens: Page budget in estimated tokens (GAM: 2048 for HotpotQA).
        max_iters: Research rounds per question (GAM: 3).
        top_k_per_tool: Pages per search tool and page-id list length (GAM: 5).
        abstracts_max_chars: Cap on the abstract list shown to the memo writer
            and the planner; ``None`` = uncapped, as in GAM.
        evidence_max_chars: Cap on the page text one integrate call reads;
            ``None`` = all hit pages whole, as in GAM.
        summary_max_chars: Cap on the running summary, i.e. on the context
            handed to the answerer in integrate mode; ``None`` = uncapped, as
            in GAM (its length is then bounded by the integrate completion cap).
        integrate: ``False`` selects GAM's no-integrate search path.
        max_new_tokens: Completion cap per stage.
        temperature: Sampling temperature of every GAM stage; ``None`` keeps
            the client's setting (greedy in our runs; GAM's code uses 0.3).
        seed: Seed of sampled stages, so that sampled runs repeat and are cached.
    """

    def __init__(
        self,
        llm: LLMClient,
        embedder: Embedder,
        page_tokens: int = 2048,
        max_iters: int = 3,
        top_k_per_tool: int = 5,
        abstracts_max_chars: int | None = None,
        evidence_max_chars: int | None = None,
        summary_max_chars: int | None = None,
        integrate: bool = True,
        max_new_tokens: Mapping[str, int] | None = None,
        temperature: float | None = None,
        seed: int = 0,
    ) -> None:
        if max_iters < 1:
            raise ValueError("max_iters must be at least 1")
        self.llm = llm
        self.embedder = embedder
        self.page_tokens = page_tokens
        self.max_iters = max_iters
        self.top_k = top_k_per_tool
        self.abstracts_max_chars = abstracts_max_chars
        self.evidence_max_chars = evidence_max_chars
        self.summary_max_chars = summary_max_chars
        self.integrate = integrate
        self.max_new_tokens = {**DEFAULT_MAX_NEW_TOKENS, **(max_new_tokens or {})}
        self.temperature = temperature
        self.seed = seed
        self.reset()

    # ---- ingestion ----

    def reset(self) -> None:
        self.pages: list[Page] = []
        self.index = PageIndex(self.embedder)
        self.memo_failures = 0
        self.memo_ms = 0.0
        self._buffer: list[Item] = []
        self._buffer_tokens = 0

    def add(self, item: Item) -> None:
        cost = _estimate_tokens(_item_line(item))
        if self._buffer and (item.session != self._buffer[0].session or self._buffer_tokens + cost > self.page_tokens):
            self._close_page()
        self._buffer.append(item)
        self._buffer_tokens += cost

    def finish_ingestion(self) -> None:
        if self._buffer:
            self._close_page()

    def _close_page(self) -> None:
        items, self._buffer, self._buffer_tokens = self._buffer, [], 0
        index = len(self.pages)
        text = _render_page(index, items)
        earlier = render_abstracts([page.abstract for page in self.pages], self.abstracts_max_chars)
        start = time.perf_counter()
        raw = self.llm.generate([memo_prompt(earlier, text)], "memo", **self._settings("memo"))[0]
        self.memo_ms += (time.perf_counter() - start) * 1000
        abstract = " ".join(re.sub(r"<think>.*?</think>", "", raw, flags=re.DOTALL).split())
        if is_placeholder(abstract):
            self.memo_failures += 1
            abstract = clip(" ".join(_item_line(item) for item in items), FALLBACK_ABSTRACT_CHARS)
        self.pages.append(Page(index, [item.id for item in items], text, abstract))
        self.index.add(text)

    # ---- research ----

    @property
    def call_bound(self) -> dict[str, int]:
        """Most LLM calls one question can cost: logical calls, and backend calls with JSON retries."""
        per_round = 2 if self.integrate else 1
        logical = per_round * self.max_iters + 2 * (self.max_iters - 1)
        return {"logical": logical, "backend": 2 * logical}

    def retrieve(self, question: Question) -> Context:
        self.finish_ingestion()  # idempotent; a memory is searchable even if the runner forgot
        trace = _Trace()
        request = question.text
        for round_no in range(self.max_iters if self.pages else 0):
            plan = self._plan(request, trace)
            hits = self._search(plan, trace)
            trace.rounds.append({"request": request, **asdict(plan), "hits": [page for page, _, _ in hits]})
            if hits:
                self._integrate(question.text, hits, trace)
            if round_no == self.max_iters - 1:
                break
            next_request = self._reflect(question.text, trace)
            if next_request is None:
                break
            request = next_request
        source_ids = [item_id for page in trace.pages_read for item_id in self.pages[page].item_ids]
        telemetry = {
            "iterations": len(trace.rounds),
            "stop_reason": trace.stop_reason if self.pages else "no_pages",
            "llm_calls": trace.llm_calls,
            "tool_calls": dict(trace.tool_calls),
            "fallbacks": dict(trace.fallbacks),
            "pages_read": trace.pages_read,
            "rounds": trace.rounds,
        }
        timings = {stage: trace.timings_ms[stage] for stage in ("plan", "search", "integrate", "reflect")}
        return Context(text=trace.summary, source_ids=source_ids, timings_ms=timings, telemetry=telemetry)

    def _settings(self, stage: str) -> dict[str, Any]:
        settings: dict[str, Any] = {"max_new_tokens": self.max_new_tokens[stage]}
        if self.temperature is not None:
            settings.update(temperature=self.temperature, seed=self.seed)
        return settings

    def _json(self, prompt: str, stage: str, schema: Mapping[str, Any], trace: _Trace) -> dict[str, Any] | None:
        start = time.perf_counter()
        value = self.llm.generate_json([prompt], stage, schema, **self._settings(stage))[0]
        trace.timed(stage, start)
        trace.llm_calls += 1
        return value

    def _plan(self, request: str, trace: _Trace) -> Plan:
        abstracts = render_abstracts([page.abstract for page in self.pages], self.abstracts_max_chars)
        data = self._json(plan_prompt(request, abstracts), "plan", PLAN_SCHEMA, trace)
        plan = Plan.from_json(data, len(self.pages), self.top_k) if data else None
        if plan is None or plan.empty():
            trace.fallbacks["plan" if plan is None else "plan_empty"] += 1
            plan = Plan.from_request(request)
        return plan

    def _search(self, plan: Plan, trace: _Trace) -> list[tuple[int, float, str]]:
        """Run the plan's tools; one hit per page (best score), best first, as GAM orders them."""
        start = time.perf_counter()
        hits: list[tuple[int, float, str]] = []
        if plan.keywords:
            found = self.index.keyword(" ".join(plan.keywords), self.top_k)
            hits += [(page, score, "keyword") for page, score in found]
            trace.tool_calls["keyword"] += 1
        if plan.vector_queries:
            hits += [(page, score, "vector") for page, score in self.index.vector(plan.vector_queries, self.top_k)]
            trace.tool_calls["vector"] += 1
        if plan.page_ids:
            hits += [(page, 0.0, "page_index") for page in plan.page_ids]
            trace.tool_calls["page_index"] += 1
        best: dict[int, tuple[int, float, str]] = {}
        for hit in hits:
            if hit[0] not in best or hit[1] > best[hit[0]][1]:
                best[hit[0]] = hit
        trace.timed("search", start)
        return sorted(best.values(), key=lambda hit: -hit[1])

    def _integrate(self, question: str, hits: Sequence[tuple[int, float, str]], trace: _Trace) -> None:
        evidence, read = self._evidence(hits)
        trace.pages_read += [page for page in read if page not in trace.pages_read]
        if not self.integrate:
            trace.summary = evidence
            return
        data = self._json(integrate_prompt(question, evidence, trace.summary), "integrate", INTEGRATE_SCHEMA, trace)
        if data is None:
            trace.fallbacks["integrate"] += 1
            merged = f"{trace.summary}\n{evidence}".strip()
        else:
            merged = data["content"].strip()
        trace.summary = clip(merged, self.summary_max_chars)

    def _evidence(self, hits: Sequence[tuple[int, float, str]]) -> tuple[str, list[int]]:
        """Hit pages whole, numbered as GAM lists them, until ``evidence_max_chars``."""
        blocks: list[str] = []
        read: list[int] = []
        room = self.evidence_max_chars
        for rank, (page, _, tool) in enumerate(hits, 1):
            if room is not None and room < MIN_EVIDENCE_CHARS:
                break
            block = clip(f"{rank}. [{tool}] {self.pages[page].text}", room)
            blocks.append(block)
            read.append(page)
            if room is not None:
                room -= len(block) + 1
        return "\n".join(blocks), read

    def _reflect(self, question: str, trace: _Trace) -> str | None:
        """GAM's two-step reflection; returns the next request, or ``None`` to stop."""
        check = self._json(check_prompt(question, trace.summary), "reflect", CHECK_SCHEMA, trace)
        if check is None:
            trace.fallbacks["reflect"] += 1
            trace.stop_reason = "reflect_failed"
            return None
        if check["enough"]:
            trace.stop_reason = "enough"
            return None
        follow = self._json(requests_prompt(question, trace.summary), "reflect", REQUESTS_SCHEMA, trace)
        if follow is None:
            trace.fallbacks["reflect"] += 1
            trace.stop_reason = "reflect_failed"
            return None
        requests = _strings(follow["new_requests"])[:MAX_FOLLOW_UPS]
        if not requests:
            trace.stop_reason = "no_requests"
            return None
        return " ".join(requests)

    # ---- state ----

    def describe(self) -> dict[str, Any]:
        sizes = [len(page.item_ids) for page in self.pages]
        return {
            "pages": len(self.pages),
            "mean_page_items": sum(sizes) / len(sizes) if sizes else 0.0,
            "mean_abstract_chars": sum(len(p.abstract) for p in self.pages) / len(sizes) if sizes else 0.0,
            "memo_failures": self.memo_failures,
            "memo_ms": self.memo_ms,
            "call_bound_per_question": self.call_bound,
        }

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        state = {
            "pages": [asdict(page) for page in self.pages],
            "buffer": [asdict(item) for item in self._buffer],
            "memo_failures": self.memo_failures,
            "memo_ms": self.memo_ms,
        }
        (directory / "gam.json").write_text(json.dumps(state, ensure_ascii=False))
        self.index.save(directory)

    def load(self, directory: Path) -> None:
        state = json.loads((directory / "gam.json").read_text())
        self.reset()
        self.pages = [Page(**row) for row in state["pages"]]
        self.index = PageIndex.load(directory, self.embedder, [page.text for page in self.pages])
        for row in state["buffer"]:
            self.add(Item(**row))
        self.memo_failures = state["memo_failures"]
        self.memo_ms = state["memo_ms"]


def _item_line(item: Item) -> str:
    """One item as GAM's LoCoMo pages show a turn: ``speaker (dia_id): text``."""
    who = f"{item.speaker} " if item.speaker else ""
    return f"{who}({item.id}): {item.text}"


def _render_page(index: int, items: Sequence[Item]) -> str:
    """A page as GAM stores a session: a header with the page, session and date, then the items."""
    first = items[0]
    parts = (f"Page {index}", first.session, first.timestamp and f"date {first.timestamp}")
    header = ", ".join(part for part in parts if part)
    return "\n".join([f"=== {header} ===", *(_item_line(item) for item in items)])


def _estimate_tokens(text: str) -> int:
    return len(text) // CHARS_PER_TOKEN + 1
