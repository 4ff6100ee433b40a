"""GAM's three search tools over whole pages: BM25, dense, and page-id lookup.

Followed: GAM research code (``research/gam_research/retriever/``):
``BM25Retriever`` indexes page contents in a pyserini/Lucene index,
``DenseRetriever`` embeds page contents (bge-m3) into a FAISS inner-product
index and, for several queries, sums each page's scores before taking the
top-k, ``IndexRetriever`` returns pages by number. ``ResearchAgent._search``
joins all keywords into one BM25 query, runs every vector query, reads the
listed pages, keeps the best score per page and orders the hits by score.

Ours: BM25 through ``rank-bm25`` with Lucene's settings (idf
``log(1 + (N - n + 0.5) / (n + 0.5))``, k1 = 0.9, b = 0.4, the Anserini
defaults pyserini searches with) and Lucene's English analysis (lower case,
its stop words, Porter stemming), because ``rank-bm25``'s own Okapi idf goes
negative on memories of a handful of pages. Dense search uses the shared
MiniLM embedder and :class:`clag.embed.VectorIndex`; MiniLM reads the first
256 word pieces of a page (bge-m3 in GAM: 512), so dense search sees the
start of long pages only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

from nltk.stem import PorterStemmer
from rank_bm25 import BM25Okapi

from clag.embed import Embedder, VectorIndex

# Lucene's EnglishAnalyzer stop words (the classic 33-word set).
_STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with".split()
)
_WORD = re.compile(r"\w+")
_STEMMER = PorterStemmer()


def analyze(text: str) -> list[str]:
    """Lucene-like English analysis: lower-cased word tokens, stop words out, Porter stems."""
    return [_STEMMER.stem(word) for word in _WORD.findall(text.lower()) if word not in _STOP_WORDS]


class LuceneBM25(BM25Okapi):
    """BM25 with Lucene's always-positive idf and Anserini's k1/b defaults."""

    def __init__(self, corpus: Sequence[list[str]], k1: float = 0.9, b: float = 0.4) -> None:
        super().__init__(list(corpus), k1=k1, b=b)

    def _calc_idf(self, nd: dict[str, int]) -> None:
        for word, freq in nd.items():
            self.idf[word] = math.log(1 + (self.corpus_size - freq + 0.5) / (freq + 0.5))


class PageIndex:
    """Keyword and dense search over page texts; page ids are list positions.

    Args:
        embedder: The shared sentence embedder.
    """

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.dense = VectorIndex(embedder.dim)
        self.texts: list[str] = []
        self._bm25: LuceneBM25 | None = None

    def __len__(self) -> int:
        return len(self.texts)

    def add(self, text: str) -> int:
        """Index one page and return its id."""
        page_id = len(self.texts)
        self.dense.add([str(page_id)], self.embedder.encode([text]))
        self.texts.append(text)
        self._bm25 = None  # rebuilt on the next keyword search, like GAM's retriever update
        return page_id

    def keyword(self, query: str, k: int) -> list[tuple[int, float]]:
        """Top-``k`` pages by BM25; pages that share no term with the query are not hits."""
        terms = analyze(query)
        if not terms or not self.texts:
            return []
        if self._bm25 is None:
            self._bm25 = LuceneBM25([analyze(text) for text in self.texts])
        scores = self._bm25.get_scores(terms)
        ranked = sorted(range(len(scores)), key=lambda i: -scores[i])
        return [(i, float(scores[i])) for i in ranked[:k] if scores[i] > 0]

    def vector(self, queries: Sequence[str], k: int) -> list[tuple[int, float]]:
        """Top-``k`` pages by summed cosine over all queries (GAM's DenseRetriever.search)."""
        if not queries or not self.texts:
            return []
        totals: dict[int, float] = {}
        for vector in self.embedder.encode(list(queries)):
            for key, score in self.dense.search(vector, k):
                totals[int(key)] = totals.get(int(key), 0.0) + score
        return sorted(totals.items(), key=lambda hit: -hit[1])[:k]

    def save(self, directory: Path) -> None:
        self.dense.save(directory, name="pages")

    @classmethod
    def load(cls, directory: Path, embedder: Embedder, texts: Sequence[str]) -> PageIndex:
        index = cls(embedder)
        index.dense = VectorIndex.load(directory, embedder.dim, name="pages")
        index.texts = list(texts)
        return index
