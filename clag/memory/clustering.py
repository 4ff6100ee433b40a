"""CLAG's cluster state: K-Means cold start, splits, centroids, representatives, profiles.

Follows dmis-lab/CLAG ``CLAG_memory.py``:

- cold start (``cluster_memories_kmeans``): K-Means over the buffered notes;
  centroids are the K-Means centres;
- profiles (``_build_cluster_profiles_with_llm``): the SLM reads the notes
  nearest the centroid (content, context, tags) and writes a one-sentence
  summary and three one-word tags; a failed profile keeps a summary built
  from the members' most frequent tags, as the authors' pre-LLM summary;
- new clusters (``_create_new_cluster``): the note's vector is the centroid,
  its tags the profile;
- consolidation (``consolidate_memories``): clusters above ``tau_split`` are
  split with K-Means k=2, every centroid becomes its members' mean, the
  3 members nearest it become the representatives, and every profile is
  rewritten.

Differences, documented here and in ``configs/method/clag.yaml``:

- the authors seed K-Means with 42; ours comes from ``seed`` (42 is one
  override away); both use 10 K-Means restarts;
- the authors keep the first three members as examples until the first
  consolidation sets representatives; we compute representatives at cold
  start already (the profile prompt used them there too).

Stage-2 search and local evolution run over a per-cluster
:class:`clag.cluster_index.ClusterIndex`, kept in step with every change of
membership or vectors here, so their cost follows the clusters searched,
not the whole memory (``make bench`` measures both).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.cluster import KMeans

from clag.cluster_index import ClusterIndex
from clag.llm.client import LLMClient
from clag.memory.agentic import AgenticCore, Note, clean_strings

log = logging.getLogger(__name__)

KMEANS_RESTARTS = 10  # sklearn's n_init in the authors' KMeans calls (not the paper's n_init)
SNIPPET_CHARS = 160  # representative-note excerpt length in router / picker prompts (authors' value)

PROFILE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"summary": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["summary", "tags"],
}


@dataclass
class Cluster:
    """One cluster and its profile.

    Attributes:
        id: Stable id shown to the SLM (``cluster_<n>``).
        members: Memory indices, in joining order.
        summary: Profile: one-sentence topic summary.
        tags: Profile: descriptive tags.
        reps: Representative members (nearest the centroid).
        profile_source: ``llm``, ``fallback`` (the SLM's profile was unusable)
            or ``heuristic`` (a new cluster's profile from its first note).
    """

    id: str
    members: list[int]
    summary: str = ""
    tags: list[str] = field(default_factory=list)
    reps: list[int] = field(default_factory=list)
    profile_source: str = "heuristic"


def profile_prompt(samples: Sequence[Note]) -> str:
    """Cluster profile (paraphrase of ``_build_cluster_profiles_with_llm``)."""
    shown = "\n".join(f"- content: {n.content}\n  context: {n.context}\n  tags: {n.tags}" for n in samples)
    return (
        "The memory notes below belong to one cluster.\n\n"
        f"{shown}\n\n"
        "Describe the cluster: one short sentence summarising its main topic, and exactly three "
        "distinct tags of one word each.\n"
        'Reply with a JSON object with the keys "summary" (string) and "tags" (list of three strings).'
    )


def describe_candidates(clusters: Sequence[Cluster], notes: Sequence[Note], with_size: bool) -> str:
    """Candidate clusters as the router and the picker show them: id, profile, examples."""
    blocks = []
    for cluster in clusters:
        examples = "\n".join(
            f"    - {notes[i].content[:SNIPPET_CHARS].replace(chr(10), ' ')}" for i in cluster.reps[:3]
        )
        size = f"  size: {len(cluster.members)}\n" if with_size else ""
        blocks.append(
            f"- cluster_id: {cluster.id}\n{size}  summary: {cluster.summary}\n  tags: {cluster.tags}\n"
            f"  representative notes:\n{examples}"
        )
    return "\n".join(blocks)


def kmeans(vectors: np.ndarray, k: int, seed: int, init: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Labels and centres; ``init`` warm-starts from given centres (one run)."""
    if init is None:
        model = KMeans(n_clusters=k, random_state=seed, n_init=KMEANS_RESTARTS)
    else:
        model = KMeans(n_clusters=k, random_state=seed, n_init=1, init=init)
    labels = model.fit_predict(vectors.astype(np.float64))
    return labels, model.cluster_centers_.astype(np.float32)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / ((np.linalg.norm(a) * np.linalg.norm(b)) + 1e-8))


class ClusterSet:
    """Clusters with their centroids, kept in creation order.

    Args:
        core: The note pool (vectors and notes are read from it).
        llm: Client for the ``profile`` stage.
        seed: K-Means ``random_state``.
        n_reps: Representatives per cluster (the authors' 3).
    """

    def __init__(self, core: AgenticCore, llm: LLMClient, seed: int = 0, n_reps: int = 3) -> None:
        self.core = core
        self.llm = llm
        self.seed = seed
        self.n_reps = n_reps
        self.clusters: dict[str, Cluster] = {}
        self.centroids: dict[str, np.ndarray] = {}
        self.events: list[dict[str, Any]] = []
        self.next_id = 0
        self.profile_fallbacks = 0
        self.index = ClusterIndex(core.embedder.dim)

    def __len__(self) -> int:
        return len(self.clusters)

    def __bool__(self) -> bool:
        return bool(self.clusters)

    def _new_id(self) -> str:
        cid = f"cluster_{self.next_id}"
        self.next_id += 1
        return cid

    # -- geometry ------------------------------------------------------------

    def nearest(self, vector: np.ndarray, k: int) -> list[str]:
        """The ``k`` clusters whose centroids are nearest (squared Euclidean, as the authors rank)."""
        ids = list(self.centroids)
        matrix = np.stack([self.centroids[c] for c in ids])
        distances = np.sum((matrix - vector) ** 2, axis=1)
        return [ids[i] for i in np.argsort(distances, kind="stable")[:k]]

    def most_similar(self, vector: np.ndarray) -> str:
        """The cluster whose centroid has the highest cosine to ``vector``."""
        ids = list(self.centroids)
        return max(ids, key=lambda cid: cosine(vector, self.centroids[cid]))

    def similarity(self, vector: np.ndarray, cid: str) -> float:
        return cosine(vector, self.centroids[cid])

    def members_of(self, cids: Sequence[str]) -> list[int]:
        return [i for cid in cids for i in self.clusters[cid].members]

    def search(self, query: np.ndarray, k: int, cids: Sequence[str]) -> list[int]:
        """Top-``k`` members of ``cids`` by cosine, best first (only their vectors are scanned)."""
        return [int(key) for key, _ in self.index.search(query, k, cids)]

    def reindex(self, cids: Sequence[str] | None = None) -> None:
        """Rebuild the search matrices of ``cids`` (all clusters when None) from the note vectors."""
        if cids is None:
            self.index = ClusterIndex(self.core.embedder.dim)
            cids = list(self.clusters)
        for cid in cids:
            members = self.clusters[cid].members
            self.index.set_cluster(cid, [str(i) for i in members], self.core.vectors(members))

    # -- structure changes ---------------------------------------------------

    def cold_start(self, k: int) -> None:
        """K-Means over every note so far, then representatives and profiles."""
        indices = list(range(len(self.core)))
        k = max(1, min(k, len(indices)))
        labels, centres = kmeans(self.core.vectors(indices), k, self.seed)
        created = []
        for label in range(k):
            members = [i for i, lab in zip(indices, labels) if lab == label]
            if members:
                cid = self._new_id()
                self.clusters[cid] = Cluster(cid, members)
                self.centroids[cid] = centres[label]
                created.append(cid)
        self.events.append({"event": "cold_start", "at_item": len(indices), "clusters": len(created)})
        self.reindex()
        self._set_representatives(created)
        self.write_profiles(created)

    def open(self, note: Note, vector: np.ndarray, reason: str) -> str:
        """A new cluster around one note, with the authors' heuristic profile."""
        cid = self._new_id()
        summary = f"Cluster around: {', '.join(note.tags) or note.context[:50]}"
        self.clusters[cid] = Cluster(cid, [note.index], summary, list(note.tags), [note.index])
        self.centroids[cid] = vector.astype(np.float32)
        self.index.set_cluster(cid, [str(note.index)], vector)
        self.events.append({"event": "new_cluster", "at_item": len(self.core), "cluster": cid, "reason": reason})
        return cid

    def assign(self, cid: str, index: int, vector: np.ndarray, incremental: bool) -> None:
        """Add a member; ``incremental`` moves the centroid to the running mean."""
        cluster = self.clusters[cid]
        cluster.members.append(index)
        self.index.add(cid, [str(index)], vector)
        if incremental:
            self.centroids[cid] = self.centroids[cid] + (vector - self.centroids[cid]) / len(cluster.members)

    def refit(self) -> None:
        """Re-run K-Means over all clustered notes from the current centroids
        (the "K-Means clustering" routing variant of Table 5)."""
        ids = list(self.clusters)
        indices = sorted(self.members_of(ids))
        labels, centres = kmeans(
            self.core.vectors(indices), len(ids), self.seed, np.stack(list(self.centroids.values()))
        )
        for position, cid in enumerate(ids):
            self.clusters[cid].members = [i for i, lab in zip(indices, labels) if lab == position]
            self.centroids[cid] = centres[position]
        self._drop_empty()
        self.reindex()
        self.events.append({"event": "refit", "at_item": len(self.core), "clusters": len(self.clusters)})

    def split_large(self, tau_split: int) -> list[str]:
        """Split every cluster with more than ``tau_split`` members in two (K-Means k=2)."""
        created = []
        for cid in [c for c, cluster in self.clusters.items() if len(cluster.members) > max(tau_split, 1)]:
            members = self.clusters[cid].members
            labels, centres = kmeans(self.core.vectors(members), 2, self.seed)
            parts = []
            for label in (0, 1):
                new_id = self._new_id()
                self.clusters[new_id] = Cluster(new_id, [i for i, lab in zip(members, labels) if lab == label])
                self.centroids[new_id] = centres[label]
                parts.append(new_id)
            del self.clusters[cid], self.centroids[cid]
            sizes = [len(self.clusters[p].members) for p in parts]
            self.events.append(
                {"event": "split", "at_item": len(self.core), "cluster": cid, "into": parts, "sizes": sizes}
            )
            created += parts
        self._drop_empty()
        if created:
            self.reindex()
        return created

    def recompute(self) -> None:
        """Centroids as member means and fresh representatives (``consolidate_memories``);
        the search matrices are rebuilt too, as the notes may have been re-embedded."""
        for cid, cluster in self.clusters.items():
            self.centroids[cid] = self.core.vectors(cluster.members).mean(axis=0)
        self._set_representatives(list(self.clusters))
        self.reindex()

    def _set_representatives(self, cids: Sequence[str]) -> None:
        for cid in cids:
            members = self.clusters[cid].members
            distances = np.sum((self.core.vectors(members) - self.centroids[cid]) ** 2, axis=1)
            self.clusters[cid].reps = [members[i] for i in np.argsort(distances, kind="stable")[: self.n_reps]]

    def _drop_empty(self) -> None:
        for cid in [c for c, cluster in self.clusters.items() if not cluster.members]:
            del self.clusters[cid], self.centroids[cid]

    # -- profiles --------------------------------------------------------------

    def write_profiles(self, cids: Sequence[str]) -> None:
        """One ``profile`` call per cluster, batched; unusable answers fall back (counted)."""
        if not cids:
            return
        notes = self.core.notes
        prompts = [profile_prompt([notes[i] for i in self.clusters[cid].reps]) for cid in cids]
        for cid, value in zip(cids, self.llm.generate_json(prompts, "profile", PROFILE_SCHEMA)):
            cluster = self.clusters[cid]
            tags = _one_word_tags(value["tags"]) if value else []
            if value and tags:
                cluster.summary, cluster.tags, cluster.profile_source = value["summary"].strip(), tags, "llm"
            else:
                cluster.summary, cluster.tags = self._fallback_profile(cluster)
                cluster.profile_source = "fallback"
                self.profile_fallbacks += 1

    def _fallback_profile(self, cluster: Cluster) -> tuple[str, list[str]]:
        """The authors' pre-LLM summary: the members' most frequent tags (keywords if none)."""
        counts: Counter[str] = Counter()
        for i in cluster.members:
            note = self.core.notes[i]
            counts.update(note.tags or note.keywords)
        top = [tag for tag, _ in counts.most_common(5)]
        summary = f"Memories related to: {', '.join(top)}" if top else self.core.notes[cluster.reps[0]].context
        return summary, top[:3]

    # -- telemetry and persistence -------------------------------------------

    def describe(self) -> dict[str, Any]:
        return {
            "clusters": len(self.clusters),
            "cluster_sizes": {cid: len(c.members) for cid, c in self.clusters.items()},
            # by source item, so the findings can tell whether a question's evidence lay in the clusters picked
            "cluster_members": {
                cid: [self.core.notes[i].source_id for i in c.members] for cid, c in self.clusters.items()
            },
            "profiles": {
                cid: {"summary": c.summary, "tags": c.tags, "source": c.profile_source}
                for cid, c in self.clusters.items()
            },
            "events": list(self.events),
            "profile_fallbacks": self.profile_fallbacks,
        }

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        ids = list(self.clusters)
        state = {
            "clusters": [asdict(self.clusters[cid]) for cid in ids],
            "events": self.events,
            "next_id": self.next_id,
            "profile_fallbacks": self.profile_fallbacks,
        }
        (directory / "clusters.json").write_text(json.dumps(state, ensure_ascii=False))
        centroids = np.stack([self.centroids[cid] for cid in ids]) if ids else np.zeros((0, self.core.embedder.dim))
        np.save(directory / "centroids.npy", centroids.astype(np.float32))

    def load(self, directory: Path) -> None:
        state = json.loads((directory / "clusters.json").read_text())
        centroids = np.load(directory / "centroids.npy")
        self.clusters = {row["id"]: Cluster(**row) for row in state["clusters"]}
        self.centroids = {cid: centroids[i] for i, cid in enumerate(self.clusters)}
        self.events = state["events"]
        self.next_id = state["next_id"]
        self.profile_fallbacks = state["profile_fallbacks"]
        self.reindex()


def _one_word_tags(value: Any, limit: int = 3) -> list[str]:
    """The authors' tag cleaning: first word of each tag, distinct, at most three."""
    words = [tag.split()[0] for tag in clean_strings(value)]
    return list(dict.fromkeys(words))[:limit]
