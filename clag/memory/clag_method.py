"""CLAG: clustering-based agentic memory for small language models.

Follows the paper (Table 8 defaults) and dmis-lab/CLAG ``CLAG_memory.py``
(``AgenticMemorySystem``) with its evaluation loop ``test_CLAG.py``. Each
item goes through (``add_note``):

1. note construction (core, stage ``note``);
2. routing, once clusters exist (``route_new_memory_with_llm``): the
   ``k_route`` centroids nearest the note's vector are shown with their
   profiles and the SLM picks one (stage ``route``); a cosine below ``tau``
   to the chosen centroid opens a new cluster;
3. evolution over the ``k_local`` nearest members of the routed cluster
   (``process_memory(note, cluster_id)``, stage ``evolve``); with no routed
   cluster (before cold start, or when a new cluster is opened) the
   neighbours come from the whole pool, as in the authors' code;
4. the note joins its cluster (or founds a new one);
5. every ``consolidate_every`` evolving notes, consolidation (split above
   ``tau_split``, centroids, representatives, profiles: stage ``profile``);
6. after ``buffer_size`` notes, the cold start (K-Means with ``n_init``
   clusters, one ``profile`` call per cluster).

After the last item, :meth:`finish_ingestion` runs the cold start if it is
still due and a consolidation (``test_CLAG.py`` does both).

LLM calls per item: **2** before the cold start (note, evolve) and **3** after
it (note, route, evolve) with ``routing=agentic``; 2 with ``cosine`` or
``kmeans`` routing. Profile calls come on top: one per cluster at the cold
start and at every consolidation (including the final one), and one per new
cluster with ``new_cluster_profile=llm``. Each unusable JSON answer costs one
sampled retry (counted by the client as a call of its stage).

Per question (``find_related_memories_raw``): the ``keywords`` call, then,
once clusters exist and ``retrieval=two_stage``, one ``pick`` call that
selects zero or more of the ``k_route`` clusters nearest the query, and the
top ``retrieve_k`` notes inside the selected clusters (the whole pool when
none is selected), each followed by its linked notes; then the shared
``answer`` call: **3 calls per question** (2 before the cold start).

Small-model robustness: the router and the picker answer JSON with a
``reason`` and ids constrained to the candidates (an ``enum`` in the schema
for backends that decode with it); answers are validated, and an unusable
or invalid one falls back as configured (``invalid_route``,
``pick_fallback``), counted by reason in :meth:`describe` and in each
question's telemetry. Nothing raises.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from clag.answer import timed_keywords
from clag.embed import Embedder
from clag.llm.client import LLMClient
from clag.memory.agentic import AgenticCore, Note
from clag.memory.base import MemoryBase
from clag.memory.clustering import ClusterSet, describe_candidates
from clag.types import Context, Item, Question

log = logging.getLogger(__name__)

_CHOICES = {
    "routing": ("agentic", "cosine", "kmeans"),
    "evolution_scope": ("local", "global"),
    "retrieval": ("two_stage", "global"),
    "consolidate_counter": ("evolutions", "notes"),
    "invalid_route": ("nearest", "new_cluster"),
    "pick_fallback": ("global", "nearest"),
    "merge": ("union", "per_cluster"),
    "centroid_update": ("consolidation", "incremental"),
    "new_cluster_profile": ("heuristic", "llm"),
}


def route_schema(candidates: Sequence[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"reason": {"type": "string"}, "choice": {"type": "string", "enum": list(candidates)}},
        "required": ["choice"],
    }


def pick_schema(candidates: Sequence[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "reason": {"type": "string"},
            "selected_clusters": {"type": "array", "items": {"type": "string", "enum": list(candidates)}},
        },
        "required": ["selected_clusters"],
    }


def route_prompt(note: Note, candidates: str) -> str:
    """Routing (paraphrase of ``route_new_memory_with_llm``), asking for a reason first."""
    return (
        "You assign a new memory note to the memory cluster it belongs to.\n\n"
        f"New note\ncontent: {note.content}\ncontext: {note.context}\ntags: {note.tags}\n\n"
        f"Candidate clusters, closest first:\n{candidates}\n\n"
        "Compare the topics of the candidates with the new note and choose the single cluster that "
        "fits it best. The choice must be one of the cluster_id values listed above.\n"
        'Reply with a JSON object: {"reason": "<one short sentence>", "choice": "<a cluster_id from the list>"}'
    )


def pick_prompt(query: str, query_tags: Sequence[str], candidates: str) -> str:
    """Cluster selection at question time (paraphrase of ``select_clusters_for_query``)."""
    return (
        "You select the memory clusters that can help answer a query.\n\n"
        f"Query: {query}\nQuery tags: {list(query_tags)}\n\n"
        f"Candidate clusters:\n{candidates}\n\n"
        "Judge how relevant each candidate is to the query and return the clusters needed to answer "
        "it: one if it clearly suffices, more if the answer needs several, none if no cluster is "
        "related. Use only cluster_id values listed above.\n"
        'Reply with a JSON object: {"reason": "<one short sentence>", "selected_clusters": ["<cluster_id>", ...]}'
    )


def match_candidate(value: Any, candidates: Sequence[str]) -> str | None:
    """A candidate id from an SLM answer: exact, case-insensitive, or a bare cluster number."""
    text = str(value).strip().strip("\"'`").lower()
    if text.isdigit():
        text = f"cluster_{text}"
    return next((cid for cid in candidates if cid.lower() == text), None)


class ClagMemory(MemoryBase):
    """CLAG as a MemorySystem; every paper variant is a constructor argument.

    Args:
        llm: Shared client (stages ``note``, ``evolve``, ``route``,
            ``profile``, ``pick``, ``keywords``).
        embedder: Shared sentence embedder.
        retrieve_k: Notes per question (``retrieve_k`` = 10).
        buffer_size: ``n``: notes kept unclustered before the cold start (100).
        n_init: Clusters of the cold-start K-Means (Table 8: 3; Table 9 sweeps it).
        tau: New-cluster threshold on the cosine to the chosen centroid (0.1; Table 10).
        tau_split: Split clusters with more members than this (300).
        k_route: Candidate clusters shown to the router and the picker
            (Table 8: 3; the code: 5, for both).
        k_local: Neighbours shown to the evolution call (5).
        routing: ``agentic`` (SLM router), ``cosine`` (most similar centroid,
            tau rule, no SLM) or ``kmeans`` (nearest centroid, K-Means refit at
            each consolidation, no SLM): Table 5.
        evolution_scope: ``local`` (routed cluster) or ``global`` (whole pool): Table 7.
        retrieval: ``two_stage`` (pick clusters, search inside) or ``global``: Table 7.
        consolidate_every: Period of consolidation, counted in
            ``consolidate_counter`` units (100).
        consolidate_counter: ``evolutions`` (the code: notes whose evolution
            answer said should_evolve) or ``notes``.
        invalid_route: On an unusable or non-candidate router answer:
            ``nearest`` (our default: the nearest candidate, then the tau rule)
            or ``new_cluster`` (the code).
        pick_fallback: On an unusable or all-invalid picker answer: ``global``
            search (the code) or the ``nearest`` candidate cluster.
        merge: ``union`` (top-k over the selected clusters' members, as the
            paper describes) or ``per_cluster`` (the code: each cluster's top-k
            in selection order, first k distinct).
        centroid_update: ``consolidation`` (the code: centroids move only when
            consolidated) or ``incremental`` (running mean on each join).
        new_cluster_profile: ``heuristic`` (the code: from the founding note's
            tags) or ``llm`` (one ``profile`` call for the founding note).
        profile_reps: Representative notes per cluster (3).
        strict_links: Keep only links to the neighbours shown (see :mod:`clag.memory.agentic`).
        seed: K-Means ``random_state`` (the code: 42).
    """

    # Parameters that only shape retrieval: runs differing only in these share one
    # ingested memory snapshot (clag.running.snapshots.ingestion_key).
    retrieval_params = frozenset({"retrieve_k", "retrieval", "pick_fallback", "merge"})

    def __init__(
        self,
        llm: LLMClient,
        embedder: Embedder,
        retrieve_k: int = 10,
        buffer_size: int = 100,
        n_init: int = 3,
        tau: float = 0.1,
        tau_split: int = 300,
        k_route: int = 3,
        k_local: int = 5,
        routing: str = "agentic",
        evolution_scope: str = "local",
        retrieval: str = "two_stage",
        consolidate_every: int = 100,
        consolidate_counter: str = "evolutions",
        invalid_route: str = "nearest",
        pick_fallback: str = "global",
        merge: str = "union",
        centroid_update: str = "consolidation",
        new_cluster_profile: str = "heuristic",
        profile_reps: int = 3,
        strict_links: bool = True,
        seed: int = 0,
    ) -> None:
        self.params: dict[str, Any] = {
            "retrieve_k": retrieve_k,
            "buffer_size": buffer_size,
            "n_init": n_init,
            "tau": tau,
            "tau_split": tau_split,
            "k_route": k_route,
            "k_local": k_local,
            "routing": routing,
            "evolution_scope": evolution_scope,
            "retrieval": retrieval,
            "consolidate_every": consolidate_every,
            "consolidate_counter": consolidate_counter,
            "invalid_route": invalid_route,
            "pick_fallback": pick_fallback,
            "merge": merge,
            "centroid_update": centroid_update,
            "new_cluster_profile": new_cluster_profile,
            "profile_reps": profile_reps,
            "strict_links": strict_links,
            "seed": seed,
        }
        for name, allowed in _CHOICES.items():
            if self.params[name] not in allowed:
                raise ValueError(f"{name}={self.params[name]!r}; expected one of {', '.join(allowed)}")
        self.llm = llm
        self.embedder = embedder
        self.core = AgenticCore(llm, embedder, strict_links=strict_links)
        self.reset()

    def reset(self) -> None:
        self.core.reset()
        self.clusters = ClusterSet(self.core, self.llm, seed=self.params["seed"], n_reps=self.params["profile_reps"])
        self.counts: Counter[str] = Counter()
        self.consolidations = 0
        self._last_route = ""

    # -- ingestion -------------------------------------------------------------

    def add(self, item: Item) -> None:
        self.add_many([item])

    def add_many(self, items: Sequence[Item]) -> None:
        """Note calls batched (they depend on the item only); the rest item by item."""
        for note in self.core.build_notes(items):
            self._ingest(note)

    def _ingest(self, note: Note) -> None:
        core, p = self.core, self.params
        routed: str | None = None
        pre_doc = note.document()
        route_vector: np.ndarray | None = None
        if self.clusters:
            route_vector = core.embed(pre_doc)
            routed = self._route(note, route_vector)
        query = core.embed(note.content)
        if routed and p["evolution_scope"] == "local":
            neighbours = self.clusters.search(query, p["k_local"], [routed])
        else:
            neighbours = core.search(query, p["k_local"])
        evolved = core.evolve(note, neighbours)
        # The stored vector reflects the note after its own evolution (which may rewrite its tags).
        unchanged = route_vector is not None and note.document() == pre_doc
        vector = route_vector if unchanged else core.embed(note.document())
        core.commit(note, vector)
        if routed is not None:
            self.clusters.assign(routed, note.index, vector, p["centroid_update"] == "incremental")
        elif self.clusters:
            self._open_cluster(note, vector)
        if self._consolidation_due(evolved):
            self.consolidate()
        if self._cold_start_due():
            self.clusters.cold_start(p["n_init"])

    def _cold_start_due(self) -> bool:
        return not self.clusters and len(self.core) >= max(1, self.params["buffer_size"])

    def _consolidation_due(self, evolved: bool) -> bool:
        every = self.params["consolidate_every"]
        if self.params["consolidate_counter"] == "notes":
            return len(self.core) % every == 0
        return evolved and self.core.stats["evolutions"] % every == 0

    def _open_cluster(self, note: Note, vector: np.ndarray) -> None:
        cid = self.clusters.open(note, vector, reason=self._last_route)
        if self.params["new_cluster_profile"] == "llm":
            self.clusters.write_profiles([cid])

    def finish_ingestion(self) -> None:
        if self._cold_start_due():
            self.clusters.cold_start(self.params["n_init"])
        self.consolidate()

    def consolidate(self) -> None:
        """Re-embed, (K-Means refit), split, recompute centroids and representatives, re-profile.

        A no-op before the cold start, as in the authors' code. The authors
        re-embed members for their per-cluster retrievers; with one vector
        per note, the refreshed vectors serve global search too.
        """
        if not self.clusters:
            return
        self.core.refresh_embeddings()
        if self.params["routing"] == "kmeans":
            self.clusters.refit()
        self.clusters.split_large(self.params["tau_split"])
        self.clusters.recompute()
        self.clusters.write_profiles(list(self.clusters.clusters))
        self.consolidations += 1

    # -- routing -----------------------------------------------------------------

    def _route(self, note: Note, vector: np.ndarray) -> str | None:
        """The cluster the note joins, or ``None`` to open a new one.

        Sets ``self._last_route`` to the decision (counted in ``routing``).
        """
        p = self.params
        if p["routing"] == "kmeans":
            return self._decide("kmeans_nearest", self.clusters.nearest(vector, 1)[0])
        if p["routing"] == "cosine":
            choice = self.clusters.most_similar(vector)
            decision = "cosine_nearest"
        else:
            candidates = self.clusters.nearest(vector, p["k_route"])
            choice, failure = self._ask_router(note, candidates)
            decision = "agentic_pick"
            if failure:
                self.counts[f"route_fallback:{failure}"] += 1
                if p["invalid_route"] == "new_cluster":
                    return self._decide("new_cluster_invalid_pick", None)
                choice, decision = candidates[0], "fallback_nearest"
        if self.clusters.similarity(vector, choice) < p["tau"]:
            return self._decide("new_cluster_below_tau", None)
        return self._decide(decision, choice)

    def _decide(self, decision: str, choice: str | None) -> str | None:
        self.counts[f"route:{decision}"] += 1
        self._last_route = decision
        return choice

    def _ask_router(self, note: Note, candidates: list[str]) -> tuple[str | None, str | None]:
        """The SLM's pick among ``candidates`` and a failure reason (None when valid)."""
        shown = describe_candidates([self.clusters.clusters[c] for c in candidates], self.core.notes, with_size=True)
        value = self.llm.generate_json([route_prompt(note, shown)], "route", route_schema(candidates))[0]
        if value is None:
            return None, "unparseable"
        choice = match_candidate(value["choice"], candidates)
        return (choice, None) if choice else (None, "not_a_candidate")

    # -- retrieval ---------------------------------------------------------------

    def retrieve(self, question: Question) -> Context:
        p = self.params
        keywords, keywords_ms = timed_keywords(self.llm, question.text)
        query_tags = [t.strip() for t in keywords.split(",") if t.strip()]
        timings = {"keywords": keywords_ms, "pick": 0.0}
        telemetry: dict[str, Any] = {"query": keywords, "total_notes": len(self.core), "clusters": len(self.clusters)}
        selected: list[str] = []
        if p["retrieval"] == "two_stage" and self.clusters and query_tags:
            start = time.perf_counter()
            selected, picked = self._pick(keywords, query_tags)
            timings["pick"] = (time.perf_counter() - start) * 1000
            telemetry.update(picked)
        start = time.perf_counter()
        query = self.core.embed(keywords)
        hits = self._search_clusters(query, selected) if selected else []
        telemetry["mode"] = "cluster" if hits else "global"
        telemetry["search_space"] = len(self.clusters.members_of(selected)) if hits else len(self.core)
        telemetry["fell_back_to_global"] = bool(selected) and not hits
        if not hits:
            hits = self.core.search(query, p["retrieve_k"])
        timings["search"] = (time.perf_counter() - start) * 1000
        text, source_ids, telemetry["link_share"] = self.core.render(hits, p["retrieve_k"])
        return Context(text=text, source_ids=source_ids, timings_ms=timings, telemetry=telemetry)

    def _pick(self, keywords: str, query_tags: list[str]) -> tuple[list[str], dict[str, Any]]:
        """Stage 1: the SLM selects clusters among the nearest ones; returns them and telemetry."""
        clusters = self.clusters.clusters
        candidates = self.clusters.nearest(
            self.core.embed(f"{keywords} {' '.join(query_tags)}"), self.params["k_route"]
        )
        shown = describe_candidates([clusters[c] for c in candidates], self.core.notes, with_size=False)
        value = self.llm.generate_json([pick_prompt(keywords, query_tags, shown)], "pick", pick_schema(candidates))[0]
        failure = None
        selected: list[str] = []
        if value is None:
            failure = "unparseable"
        else:
            named = value["selected_clusters"]
            selected = list(dict.fromkeys(c for c in (match_candidate(v, candidates) for v in named) if c))
            if named and not selected:
                failure = "not_a_candidate"
        if failure:
            self.counts[f"pick_fallback:{failure}"] += 1
            selected = [candidates[0]] if self.params["pick_fallback"] == "nearest" else []
        self.counts["pick:clusters" if selected else "pick:none"] += 1
        return selected, {
            "candidates": [
                {
                    "id": cid,
                    "summary": clusters[cid].summary,
                    "tags": clusters[cid].tags,
                    "size": len(clusters[cid].members),
                    "status": "selected" if cid in selected else "pruned",
                }
                for cid in candidates
            ],
            "selected": selected,
            "pruned": [c for c in candidates if c not in selected],
            "pick_fallback": failure,
            "pick_reason": str(value.get("reason", "")) if value else "",
        }

    def _search_clusters(self, query: np.ndarray, selected: list[str]) -> list[int]:
        """Stage 2: top-k inside the selected clusters."""
        k = self.params["retrieve_k"]
        if self.params["merge"] == "union":
            return self.clusters.search(query, k, selected)
        ranked = [i for cid in selected for i in self.clusters.search(query, k, [cid])]
        return list(dict.fromkeys(ranked))[:k]

    # -- telemetry and persistence -------------------------------------------------

    def describe(self) -> dict[str, Any]:
        def by_prefix(prefix: str) -> dict[str, int]:
            return {k.split(":", 1)[1]: v for k, v in sorted(self.counts.items()) if k.startswith(prefix + ":")}

        routing = by_prefix("route")
        return {
            "method": "clag",
            **self.core.describe(),
            **self.clusters.describe(),
            "routing": routing,
            "route_fallbacks": by_prefix("route_fallback"),
            "route_fallbacks_total": sum(by_prefix("route_fallback").values()),
            "picks": by_prefix("pick"),
            "pick_fallbacks": by_prefix("pick_fallback"),
            "consolidations": self.consolidations,
            "params": dict(self.params),
        }

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.core.save(directory)
        self.clusters.save(directory)
        state = {"counts": dict(self.counts), "consolidations": self.consolidations, "params": self.params}
        (directory / "clag.json").write_text(json.dumps(state, ensure_ascii=False))

    def load(self, directory: Path) -> None:
        """Restore notes, links, clusters and counters; the variant stays as constructed
        (so a memory ingested with two-stage retrieval can be queried with ``retrieval=global``)."""
        self.core.load(directory)
        self.clusters.load(directory)
        state = json.loads((directory / "clag.json").read_text())
        self.counts = Counter(state["counts"])
        self.consolidations = state["consolidations"]
