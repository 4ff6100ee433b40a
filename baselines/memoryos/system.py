"""MemoryOS (Kang et al., 2025, "Memory OS of AI Agent") as a MemorySystem.

Three tiers, as in the paper (Sections 3.2-3.4) and the authors' code
(github.com/BAI-LAB/MemoryOS; ``memoryos-pypi`` for the library,
``eval/main_loco_parse.py`` and its modules for their LoCoMo runs):

* **Short-term**: a FIFO queue of pages. When a new page arrives at a full
  queue the oldest page migrates first (``memoryos-pypi/memoryos.py``
  ``add_memory``, which migrates before adding so no page is lost).
* **Mid-term**: a migrating page gets a continuity check against the page
  that migrated before it and the running summary ("meta info") of its
  dialogue chain (``updater.py`` ``process_short_term_to_mid_term``), and
  topic summaries (at most two themes with keywords). Each topic joins the
  segment with the best ``cosine + keyword_alpha * Jaccard`` score (Eq. 3)
  if it reaches ``segment_threshold``, else opens a segment
  (``mid_term.py`` ``insert_pages_into_session``). Beyond
  ``mid_term_capacity`` segments the coldest is evicted.
* **Long-term**: after each migration the hottest segment (Eq. 4) is
  checked; at ``promotion_threshold`` its unanalysed pages update the user
  profile (one call) and the user / assistant fact lists (one call), and its
  visit and page counts reset (``memoryos.py``
  ``_trigger_profile_and_knowledge_update_if_needed``).
* **Retrieval**: the question's keywords (an LLM call, as the authors'
  LoCoMo eval does with ``llm_extract_keywords``) and embedding score the
  segments by Eq. 3; inside the top ``top_segments`` the pages whose cosine
  passes ``page_retrieval_threshold`` compete for the ``top_pages`` slots;
  matched segments are visited (heat rises). Facts come from both fact
  lists, plus the profile and the whole short-term queue. No answer is
  generated here: the shared answerer reads :attr:`Context.text`, or, with
  ``answer_step: memoryos``, sends MemoryOS's own answer prompt
  (:attr:`Context.answer_prompt`, from ``eval/main_loco_parse.py``).

Choices where the authors' LoCoMo conversion falls short (documented, each
a deliberate difference):

* Pages: their ``process_conversation`` makes speaker A the "user" and B the
  "assistant", overwrites a B turn when two follow one A turn, pairs a
  session's opening B turn with the previous session's page, and drops pages
  missing either side at migration. Ours pairs two consecutive turns of
  different speakers within one session; any other turn is a page of its
  own. Every item lands in exactly one page (``page_mode: item`` makes every
  turn its own page; HotpotQA / BioASQ, one speaker, get that anyway).
* A page never enters the same segment twice (theirs can, once per theme).
* Time is the item clock: heat recency uses the items' timestamps, never the
  wall clock (see :func:`~baselines.memoryos.state.parse_timestamp`; an
  unreadable timestamp leaves the clock where the last readable one put it,
  and is counted).
* ``source_ids`` rank: retrieved mid-term pages by page score, then the
  short-term pages newest first (they are recent context given for every
  question, not ranked evidence, so they come after the ranked pages).
* Retrieval raises the visited segments' heat, as the authors' does; heat
  acts only at ingestion (promotion, eviction), so answers do not depend on
  the order in which questions are asked, and a resumed run answers the
  same from the saved post-ingestion snapshot.

Cost: three LLM calls per page that leaves the queue (continuity, except
for the first, meta, summary), two per promotion, one per question
(keywords) before the shared answer call. A full LoCoMo conversation (about
210 pages, 200 questions) thus costs about five calls per response, near the
paper's 4.9 (Table 3).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from baselines.memoryos import prompts
from baselines.memoryos.state import FactStore, Heat, Page, Segment, parse_timestamp, to_json
from clag.answer import timed_keywords
from clag.embed import Embedder, VectorIndex
from clag.llm.client import LLMClient
from clag.memory.base import MemoryBase
from clag.types import Context, Item, Question

log = logging.getLogger(__name__)

#: LLM stages per tier, as reported in :meth:`MemoryOSMemory.describe`.
TIER_STAGES = {
    "mid_term": ("continuity", "meta", "summary"),
    "long_term": ("profile", "facts"),
    "retrieval": ("keywords",),
}
#: Who answers: the harness's shared answerer, or MemoryOS's own answer prompt.
ANSWER_STEPS = ("shared", "memoryos")


class MemoryOSMemory(MemoryBase):
    """Short-, mid- and long-term memory tiers with heat-based promotion.

    Args:
        llm: The shared client; stages ``continuity``, ``meta``, ``summary``
            (mid-term), ``profile``, ``facts`` (long-term), ``keywords`` (retrieval).
        embedder: The shared sentence embedder.
        short_term_capacity: Pages in the short-term queue (paper 7).
        mid_term_capacity: Segments kept (paper 200).
        segment_threshold: Eq. 3 score needed to join a segment (paper 0.6).
        keyword_alpha: Weight of the keyword Jaccard term in Eq. 3 (1).
        max_topics: Topics per summary (the authors ask for at most two).
        heat_alpha / heat_beta / heat_gamma: Eq. 4 weights of visits, pages, recency (paper 1/1/1).
        recency_tau_s: Eq. 4 time constant in seconds (paper 1e7).
        promotion_threshold: Heat that promotes a segment to long-term memory (paper 5).
        knowledge_capacity: Facts kept per list, first in first out (paper 100).
        eviction: ``heat`` (paper: the coldest segment goes) or ``lfu`` (code:
            the least retrieved one goes).
        top_segments / top_pages / top_facts: Retrieval sizes (paper 5 / 10 / 10).
        segment_retrieval_threshold / page_retrieval_threshold / fact_threshold:
            Minimum scores at retrieval (memoryos-pypi ``Retriever`` defaults 0.1 / 0.1 / 0.01).
        query_keywords: Score segments with the question's LLM keywords (Eq. 3's
            Jaccard term); off leaves the cosine alone (memoryos-pypi drops them).
        page_mode: ``pair`` (turn pairs) or ``item`` (one item per page).
        profile_min_chars: A shorter profile answer is rejected (memoryos-pypi: 30).
        max_new_tokens: Completion cap per stage name; stages not named keep
            the client's setting (the authors cap continuity at 10 and meta at 100 tokens).
        answer_step: ``shared`` (the harness's answerer and its category
            prompts read :attr:`Context.text`) or ``memoryos`` (MemoryOS's own
            answer prompt, :func:`~baselines.memoryos.prompts.answer_prompt`,
            handed over as :attr:`Context.answer_prompt`).
    """

    retrieval_params = frozenset({"answer_step"})

    def __init__(
        self,
        llm: LLMClient,
        embedder: Embedder,
        short_term_capacity: int = 7,
        mid_term_capacity: int = 200,
        segment_threshold: float = 0.6,
        keyword_alpha: float = 1.0,
        max_topics: int = 2,
        heat_alpha: float = 1.0,
        heat_beta: float = 1.0,
        heat_gamma: float = 1.0,
        recency_tau_s: float = 1.0e7,
        promotion_threshold: float = 5.0,
        knowledge_capacity: int = 100,
        eviction: str = "heat",
        top_segments: int = 5,
        top_pages: int = 10,
        top_facts: int = 10,
        segment_retrieval_threshold: float = 0.1,
        page_retrieval_threshold: float = 0.1,
        fact_threshold: float = 0.01,
        query_keywords: bool = True,
        page_mode: str = "pair",
        profile_min_chars: int = 30,
        max_new_tokens: Mapping[str, int] | None = None,
        answer_step: str = "shared",
    ) -> None:
        if answer_step not in ANSWER_STEPS:
            raise ValueError(f"answer_step must be one of {ANSWER_STEPS}, not {answer_step!r}")
        if short_term_capacity < 1 or mid_term_capacity < 1:
            raise ValueError("short_term_capacity and mid_term_capacity must be at least 1")
        if eviction not in ("heat", "lfu"):
            raise ValueError(f"eviction must be 'heat' or 'lfu', not {eviction!r}")
        if page_mode not in ("pair", "item"):
            raise ValueError(f"page_mode must be 'pair' or 'item', not {page_mode!r}")
        self.llm = llm
        self.embedder = embedder
        self.short_term_capacity = short_term_capacity
        self.mid_term_capacity = mid_term_capacity
        self.segment_threshold = segment_threshold
        self.keyword_alpha = keyword_alpha
        self.max_topics = max_topics
        self.heat = Heat(heat_alpha, heat_beta, heat_gamma, recency_tau_s)
        self.promotion_threshold = promotion_threshold
        self.knowledge_capacity = knowledge_capacity
        self.eviction = eviction
        self.top_segments = top_segments
        self.top_pages = top_pages
        self.top_facts = top_facts
        self.segment_retrieval_threshold = segment_retrieval_threshold
        self.page_retrieval_threshold = page_retrieval_threshold
        self.fact_threshold = fact_threshold
        self.query_keywords = query_keywords
        self.page_mode = page_mode
        self.profile_min_chars = profile_min_chars
        self.max_new_tokens = {str(k): int(v) for k, v in (max_new_tokens or {}).items()}
        self.answer_step = answer_step
        self.reset()

    # ------------------------------------------------------------------ state

    def reset(self) -> None:
        dim = self.embedder.dim
        self.pages: dict[str, Page] = {}
        self.short_term: deque[str] = deque()
        self.segments: dict[str, Segment] = {}
        self.segment_index = VectorIndex(dim)
        self.page_index = VectorIndex(dim)
        self.chain_meta: dict[str, str] = {}
        self.profile = ""
        self.user_facts = FactStore(dim, self.knowledge_capacity, "user_")
        self.assistant_facts = FactStore(dim, self.knowledge_capacity, "assistant_")
        self.speakers: list[str] = []
        self.clock = 0.0
        self.last_migrated = ""
        self.evicted_items: list[str] = []
        self.counts: Counter[str] = Counter()
        self.requests: Counter[str] = Counter()
        self.fallbacks: Counter[str] = Counter()

    def item_tiers(self) -> dict[str, str]:
        """Where every ingested item is: ``short_term``, ``mid_term`` or ``evicted`` (its segment left)."""
        tiers = {item_id: "evicted" for item_id in self.evicted_items}
        in_mid = {pid for segment in self.segments.values() for pid in segment.page_ids}
        for page in self.pages.values():
            tier = "mid_term" if page.id in in_mid else "short_term"
            tiers.update(dict.fromkeys(page.item_ids, tier))
        return tiers

    # -------------------------------------------------------------- ingestion

    def add(self, item: Item) -> None:
        self.add_many([item])

    def add_many(self, items: Sequence[Item]) -> None:
        """Queue the items' pages, then migrate what left the queue.

        Equivalent to :meth:`add` one by one (every migration keeps the item
        clock of its moment), but the continuity and summary calls, which
        depend only on page texts, go to the LLM as one batch each.
        """
        migrated: list[tuple[Page, float]] = []
        for item in items:
            migrated.extend(self._enqueue(item))
        if migrated:
            self._migrate(migrated)

    def _enqueue(self, item: Item) -> list[tuple[Page, float]]:
        moment = parse_timestamp(item.timestamp)
        if moment is None:
            self.fallbacks["timestamp"] += 1
            moment = self.clock
        self.clock = max(self.clock, moment)
        if item.speaker not in self.speakers:
            self.speakers.append(item.speaker)
        newest = self.pages[self.short_term[-1]] if self.short_term else None
        if (
            newest is not None
            and self.page_mode == "pair"
            and len(newest.item_ids) == 1
            and newest.session == item.session
            and newest.speakers[0] != item.speaker
        ):
            newest.item_ids.append(item.id)
            newest.speakers.append(item.speaker)
            newest.texts.append(item.text)
            return []
        page = Page(f"p{self.counts['pages']}", [item.id], [item.speaker], [item.text], item.session,
                    item.timestamp, moment)
        self.counts["pages"] += 1
        out = []
        if len(self.short_term) >= self.short_term_capacity:
            out.append((self.pages[self.short_term.popleft()], self.clock))
        self.short_term.append(page.id)
        self.pages[page.id] = page
        return out

    def _migrate(self, migrated: list[tuple[Page, float]]) -> None:
        pages = [page for page, _ in migrated]
        previous = [self.pages.get(self.last_migrated)] + pages[:-1]
        continuous = self._continuity(previous, pages)
        topics = self._topics(pages)
        self._chain_meta(pages, previous, continuous)
        # One encoder pass for the pages and their topic summaries.
        summaries = [summary for page_topics in topics for summary, _ in page_topics]
        vectors = self.embedder.encode([page.text() for page in pages] + summaries)
        self.page_index.add([page.id for page in pages], vectors[: len(pages)])
        topic_vectors = vectors[len(pages) :]
        offset = 0
        for (page, now), page_topics in zip(migrated, topics):
            self._insert(page, page_topics, topic_vectors[offset : offset + len(page_topics)], now)
            offset += len(page_topics)
            self._maybe_promote(now)
        self.last_migrated = pages[-1].id

    def _continuity(self, previous: list[Page | None], pages: list[Page]) -> list[bool]:
        """One continuity verdict per page; the first page ever has no predecessor."""
        asked = [i for i, prev in enumerate(previous) if prev is not None]
        answers = self._text("continuity", [prompts.continuity_prompt(previous[i].text(), pages[i].text())
                                            for i in asked])
        verdicts = [False] * len(pages)
        for i, answer in zip(asked, answers):
            verdict = prompts.parse_bool(answer)
            if verdict is None:
                self.fallbacks["continuity"] += 1  # the authors also read anything but "true" as a break
            verdicts[i] = bool(verdict)
        return verdicts

    def _chain_meta(self, pages: list[Page], previous: list[Page | None], continuous: list[bool]) -> None:
        """Link pages into chains and update each chain's running summary.

        A continuous page joins its predecessor's chain and the chain summary
        is rewritten with it; a break opens a chain. The authors copy the new
        summary onto every linked page; one summary per chain is the same.
        Calls go in rounds: round r extends every chain by its r-th page.
        """
        for page, prev, joined in zip(pages, previous, continuous):
            if joined and prev is not None:
                page.chain = prev.chain
            else:
                page.chain = f"c{self.counts['chains']}"
                self.counts["chains"] += 1
                self.chain_meta[page.chain] = ""
        pending = list(pages)
        while pending:
            batch: dict[str, Page] = {}
            for page in pending:
                batch.setdefault(page.chain, page)
            heads = list(batch.values())
            answers = self._text("meta", [prompts.meta_prompt(self.chain_meta[p.chain], p.text()) for p in heads])
            for page, answer in zip(heads, answers):
                meta = prompts.clean_text(answer)
                if not meta:
                    self.fallbacks["meta"] += 1
                    meta = self.chain_meta[page.chain] or page.text()
                self.chain_meta[page.chain] = meta
            done = {page.id for page in heads}
            pending = [page for page in pending if page.id not in done]

    def _topics(self, pages: list[Page]) -> list[list[tuple[str, list[str]]]]:
        """Topic summaries per page; an unusable answer makes the page text its own summary."""
        answers = self._json("summary", [prompts.summary_prompt(p.text(), self.max_topics) for p in pages],
                             prompts.SUMMARY_SCHEMA)
        out = []
        for page, answer in zip(pages, answers):
            topics = prompts.parse_topics(answer, self.max_topics)
            if not topics:
                # The authors fall back to one constant summary, which would pull
                # every such page into one segment; the page's own text does not.
                self.fallbacks["summary"] += 1
                topics = [(page.text(), [])]
            out.append(topics)
        return out

    def _segment_scores(self, vector: np.ndarray, keywords: Sequence[str]) -> list[tuple[str, float]]:
        """Eq. 3 for every segment, best first: cosine of summaries + alpha * keyword Jaccard."""
        words = set(keywords)
        scored = []
        for sid, cosine in self.segment_index.search(vector, len(self.segment_index)):
            other = set(self.segments[sid].keywords)
            jaccard = len(words & other) / len(words | other) if words and other else 0.0
            scored.append((sid, cosine + self.keyword_alpha * jaccard))
        return sorted(scored, key=lambda pair: -pair[1])

    def _insert(self, page: Page, topics: list[tuple[str, list[str]]], vectors: np.ndarray, now: float) -> None:
        for (summary, keywords), vector in zip(topics, vectors):
            if page.id not in self.pages:
                return  # the previous topic's new segment was evicted at once, and the page with it
            ranked = self._segment_scores(vector, keywords)
            if ranked and ranked[0][1] >= self.segment_threshold:
                segment = self.segments[ranked[0][0]]
                if page.id not in segment.page_ids:
                    segment.page_ids.append(page.id)
                    segment.length += 1
                segment.last_visit = now
                self.counts["merges"] += 1
                continue
            sid = f"s{self.counts['segments']}"
            self.counts["segments"] += 1
            self.segments[sid] = Segment(sid, summary, keywords, [page.id], length=1, last_visit=now)
            self.segment_index.add([sid], vector[None, :])
            if len(self.segments) > self.mid_term_capacity:
                self._evict(now)

    def _evict(self, now: float) -> None:
        """Drop the coldest (or least retrieved) segment; ties go to the oldest."""
        def key(segment: Segment) -> float:
            return self.heat(segment, now) if self.eviction == "heat" else segment.retrievals

        victim = min(self.segments.values(), key=key)
        del self.segments[victim.id]
        self.segment_index.remove([victim.id])
        kept = {pid for segment in self.segments.values() for pid in segment.page_ids}
        for pid in victim.page_ids:
            if pid not in kept:
                self.evicted_items.extend(self.pages.pop(pid).item_ids)
                self.page_index.remove([pid])
        self.counts["evictions"] += 1
        log.debug("evicted segment %s (%d pages)", victim.id, len(victim.page_ids))

    def _maybe_promote(self, now: float) -> None:
        """Promote the hottest segment's unanalysed pages once its heat reaches the threshold."""
        if not self.segments:
            return
        hottest = max(self.segments.values(), key=lambda segment: self.heat(segment, now))
        if self.heat(hottest, now) < self.promotion_threshold:
            return
        fresh = [self.pages[pid] for pid in hottest.page_ids if pid not in hottest.analyzed]
        if not fresh:
            return
        self._update_long_term(fresh)
        hottest.analyzed = list(hottest.page_ids)
        hottest.visits = hottest.length = 0
        hottest.last_visit = now
        self.counts["promotions"] += 1
        self.counts["promoted_pages"] += len(fresh)

    def _roles(self) -> tuple[str, str]:
        """The "user" (first speaker) and the "assistant" (second), as the authors cast a LoCoMo pair."""
        user = self.speakers[0] if self.speakers else "the user"
        assistant = self.speakers[1] if len(self.speakers) > 1 else "the other speaker"
        return user, assistant

    def _update_long_term(self, pages: list[Page]) -> None:
        user, assistant = self._roles()
        conversation = "\n".join(f"({page.timestamp}) {page.text()}" for page in pages)
        answer = prompts.clean_text(self._text("profile", [prompts.profile_prompt(self.profile, conversation,
                                                                                  user)])[0])
        if len(answer) >= self.profile_min_chars and answer.lower() != "none":
            self.profile = answer
        else:
            self.fallbacks["profile"] += 1
        facts = self._json("facts", [prompts.facts_prompt(conversation, user, assistant)], prompts.FACTS_SCHEMA)[0]
        if facts is None:
            self.fallbacks["facts"] += 1
            return
        for store, raw in ((self.user_facts, facts["user_facts"]), (self.assistant_facts, facts["assistant_facts"])):
            texts = prompts.parse_facts(raw)
            if texts:
                store.add(texts, self.embedder.encode(texts))

    def _overrides(self, stage: str) -> dict[str, Any]:
        return {"max_new_tokens": self.max_new_tokens[stage]} if stage in self.max_new_tokens else {}

    def _text(self, stage: str, prompt_list: list[str]) -> list[str]:
        if not prompt_list:
            return []
        self.requests[stage] += len(prompt_list)
        return self.llm.generate(prompt_list, stage, **self._overrides(stage))

    def _json(self, stage: str, prompt_list: list[str], schema: dict[str, Any]) -> list[dict[str, Any] | None]:
        self.requests[stage] += len(prompt_list)
        return self.llm.generate_json(prompt_list, stage, schema, **self._overrides(stage))

    # -------------------------------------------------------------- retrieval

    def retrieve(self, question: Question) -> Context:
        timings: dict[str, float] = {"keywords": 0.0}
        keywords: list[str] = []
        if self.query_keywords:
            self.requests["keywords"] += 1
            text, timings["keywords"] = timed_keywords(self.llm, question.text)  # the LLM call alone
            keywords = prompts.normalise_keywords(text)

        start = time.perf_counter()
        query = self.embedder.encode_one(question.text)  # timed with the mid-term search it serves
        ranked = self._segment_scores(query, keywords)[: self.top_segments]
        best: dict[str, float] = {}
        visited = []
        for sid, score in ranked:
            if score < self.segment_retrieval_threshold:
                continue
            segment = self.segments[sid]
            hits = self.page_index.search(query, len(segment.page_ids), subset=segment.page_ids)
            hits = [(pid, cos) for pid, cos in hits if cos >= self.page_retrieval_threshold]
            if not hits:
                continue
            segment.visits += 1
            segment.retrievals += 1
            segment.last_visit = self.clock
            visited.append(sid)
            for pid, cos in hits:
                best[pid] = max(best.get(pid, -math.inf), cos)
        mid_pages = sorted(best, key=lambda pid: -best[pid])[: self.top_pages]
        timings["mid_term"] = _ms(start)

        start = time.perf_counter()
        user_facts = self.user_facts.search(query, self.top_facts, self.fact_threshold)
        assistant_facts = self.assistant_facts.search(query, self.top_facts, self.fact_threshold)
        timings["long_term"] = _ms(start)

        start = time.perf_counter()
        recent = list(reversed(self.short_term))
        timings["short_term"] = _ms(start)

        text = self._compose(recent, mid_pages, user_facts, assistant_facts)
        source_ids = list(dict.fromkeys(i for pid in mid_pages + recent for i in self.pages[pid].item_ids))
        telemetry = {
            "query_keywords": keywords,
            "segments_searched": len(self.segments),
            "segments_ranked": len(ranked),
            "segments_visited": visited,
            "mid_term_pages": len(mid_pages),
            "short_term_pages": len(recent),
            "facts": {"user": len(user_facts), "assistant": len(assistant_facts)},
            "profile_chars": len(self.profile),
        }
        own_prompt = None
        if self.answer_step == "memoryos":
            user, assistant = self._roles()
            own_prompt = prompts.answer_prompt(text, question.text, user, assistant)
        return Context(text=text, source_ids=source_ids, timings_ms=timings, telemetry=telemetry,
                       answer_prompt=own_prompt)

    def _compose(self, recent: list[str], mid_pages: list[str], user_facts: list[str],
                 assistant_facts: list[str]) -> str:
        """The authors' generation layout (recent talk, retrieved pages with chain overview,
        then persona), as context text for the shared answerer."""
        parts = []
        if recent:
            lines = [f"({self.pages[pid].timestamp}) {self.pages[pid].text()}" for pid in reversed(recent)]
            parts.append("Recent conversation:\n" + "\n".join(lines))
        if mid_pages:
            lines = []
            for pid in mid_pages:
                page = self.pages[pid]
                lines.append(f"({page.timestamp}) {page.text()}\nThread summary: {self.chain_meta.get(page.chain, '')}")
            parts.append("Relevant past conversations:\n" + "\n\n".join(lines))
        user, other = self._roles()
        if self.profile:
            parts.append(f"Profile of {user}:\n{self.profile}")
        if user_facts:
            parts.append(f"Facts about {user}:\n" + "\n".join(f"- {fact}" for fact in user_facts))
        if assistant_facts:
            parts.append(f"Facts about {other}:\n" + "\n".join(f"- {fact}" for fact in assistant_facts))
        return "\n\n".join(parts)

    # -------------------------------------------------------------- reporting

    def describe(self) -> dict[str, Any]:
        tiers = Counter(self.item_tiers().values())
        in_mid = {pid for segment in self.segments.values() for pid in segment.page_ids}
        heats = [self.heat(segment, self.clock) for segment in self.segments.values()]
        return {
            "items": {tier: tiers.get(tier, 0) for tier in ("short_term", "mid_term", "evicted")},
            "pages": {"short_term": len(self.short_term), "mid_term": len(in_mid)},
            "segments": len(self.segments),
            "chains": self.counts["chains"],
            "heat": {
                "min": min(heats, default=0.0),
                "mean": float(np.mean(heats)) if heats else 0.0,
                "max": max(heats, default=0.0),
            },
            "segments_created": self.counts["segments"],
            "merges": self.counts["merges"],
            "evictions": self.counts["evictions"],
            "promotions": self.counts["promotions"],
            "promoted_pages": self.counts["promoted_pages"],
            "long_term": {
                "profile_chars": len(self.profile),
                "user_facts": len(self.user_facts),
                "assistant_facts": len(self.assistant_facts),
            },
            "llm_requests": {
                tier: {stage: self.requests[stage] for stage in stages} for tier, stages in TIER_STAGES.items()
            },
            "fallbacks": dict(self.fallbacks),
        }

    # ----------------------------------------------------------- persistence

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = {
            "pages": to_json(self.pages),
            "short_term": list(self.short_term),
            "segments": to_json(self.segments),
            "chain_meta": self.chain_meta,
            "profile": self.profile,
            "speakers": self.speakers,
            "clock": self.clock,
            "last_migrated": self.last_migrated,
            "evicted_items": self.evicted_items,
            "counts": dict(self.counts),
            "requests": dict(self.requests),
            "fallbacks": dict(self.fallbacks),
        }
        (directory / "memoryos.json").write_text(json.dumps(state, ensure_ascii=False))
        self.segment_index.save(directory, "segments")
        self.page_index.save(directory, "pages")
        self.user_facts.save(directory)
        self.assistant_facts.save(directory)

    def load(self, directory: Path) -> None:
        directory = Path(directory)
        self.reset()
        state = json.loads((directory / "memoryos.json").read_text())
        self.pages = {key: Page(**value) for key, value in state["pages"].items()}
        self.short_term = deque(state["short_term"])
        self.segments = {key: Segment(**value) for key, value in state["segments"].items()}
        self.chain_meta = state["chain_meta"]
        self.profile = state["profile"]
        self.speakers = state["speakers"]
        self.clock = state["clock"]
        self.last_migrated = state["last_migrated"]
        self.evicted_items = state["evicted_items"]
        self.counts = Counter(state["counts"])
        self.requests = Counter(state["requests"])
        self.fallbacks = Counter(state["fallbacks"])
        self.segment_index = VectorIndex.load(directory, self.embedder.dim, "segments")
        self.page_index = VectorIndex.load(directory, self.embedder.dim, "pages")
        self.user_facts.load(directory)
        self.assistant_facts.load(directory)


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000
