"""Answer-quality metrics of one prediction against one reference.

Two families live here, each named for where it comes from:

* The paper's metrics, as the CLAG authors compute them (dmis-lab/CLAG
  ``utils.py``: ``simple_tokenize``, ``calculate_metrics`` and the
  ``calculate_*`` helpers, unchanged from A-mem's experiment code): token F1
  over token *sets*, exact match, BLEU-1, METEOR, ROUGE-1/2/L, BERTScore F1
  and SBERT cosine. One deliberate difference: nltk's ``word_tokenize`` needs
  the ``punkt_tab`` data that no offline package ships, so BLEU tokenises
  with ``preserve_line=True`` (no sentence splitting). Both agree on one-
  sentence answers; on several sentences only a period ending a non-final
  sentence stays attached to its word.
* LoCoMo's official F1 (snap-research/LoCoMo ``task_eval/evaluation.py``:
  ``normalize_answer``, ``f1_score``, ``f1`` and ``eval_question_answering``):
  normalised, Porter-stemmed, count-based token F1, with category 1 split
  into comma-separated sub-answers, category 3 scored against the part of
  the answer before the first ``;``, and category 5 scored 1 when the
  prediction says the information is not mentioned / not available.

Functions take already-coerced strings (see ``clag.metrics.scoring``); the
neural metrics take whole lists so models run batched, and load their model
once per process on first use.
"""

from __future__ import annotations

import functools
import re
import string
from collections import Counter
from collections.abc import Sequence

from nltk.stem import PorterStemmer
from nltk.tokenize import word_tokenize
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu
from nltk.translate.meteor_score import meteor_score
from rouge_score import rouge_scorer

from clag.assets import install_wordnet

LEXICAL_KEYS = ("f1", "exact_match", "bleu1", "meteor", "rouge1", "rouge2", "rougeL")
NEURAL_KEYS = ("bert_f1", "sbert")
ANSWER_KEYS = LEXICAL_KEYS + NEURAL_KEYS

# LoCoMo's scorer counts a category-5 answer as correct when it contains one of these.
ABSTENTION_PHRASES = ("no information available", "not mentioned")

_PAPER_PUNCTUATION = str.maketrans({".": " ", ",": " ", "!": " ", "?": " "})
_OFFICIAL_STOPWORDS = re.compile(r"\b(a|an|the|and)\b")
_OFFICIAL_PUNCTUATION = str.maketrans("", "", string.punctuation)


# ---------------------------------------------------------------- the paper's


def paper_tokens(text: str) -> list[str]:
    """The authors' tokenizer: lowercase, ``. , ! ?`` become spaces, split on whitespace."""
    return text.lower().translate(_PAPER_PUNCTUATION).split()


def token_f1(prediction: str, reference: str) -> float:
    """The paper's token F1: F1 between the *sets* of paper tokens (repeats count once)."""
    predicted, gold = set(paper_tokens(prediction)), set(paper_tokens(reference))
    common = len(predicted & gold)
    if not common:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, reference: str) -> float:
    """Case-insensitive string equality, as the authors compute it."""
    return float(prediction.lower() == reference.lower())


def bleu1(prediction: str, reference: str) -> float:
    """Sentence BLEU with unigram weights and smoothing method1 on lowercased nltk word tokens."""
    hypothesis = word_tokenize(prediction.lower(), preserve_line=True)
    references = [word_tokenize(reference.lower(), preserve_line=True)]
    return float(
        sentence_bleu(references, hypothesis, weights=(1, 0, 0, 0), smoothing_function=SmoothingFunction().method1)
    )


@functools.cache
def _wordnet_ready() -> bool:
    install_wordnet()
    return True


def meteor(prediction: str, reference: str) -> float:
    """nltk METEOR on whitespace tokens (nltk lowercases them itself)."""
    _wordnet_ready()
    return float(meteor_score([reference.split()], prediction.split()))


@functools.cache
def _rouge() -> rouge_scorer.RougeScorer:
    return rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)


def rouge(prediction: str, reference: str) -> dict[str, float]:
    """ROUGE-1/2/L F-measures (rouge-score with its Porter stemmer)."""
    scores = _rouge().score(reference, prediction)
    return {name: float(value.fmeasure) for name, value in scores.items()}


def lexical_scores(prediction: str, reference: str) -> dict[str, float]:
    """Every paper metric that needs no model; all zeros when either side is empty (as the authors)."""
    if not prediction or not reference:
        return dict.fromkeys(LEXICAL_KEYS, 0.0)
    return {
        "f1": token_f1(prediction, reference),
        "exact_match": exact_match(prediction, reference),
        "bleu1": bleu1(prediction, reference),
        "meteor": meteor(prediction, reference),
        **rouge(prediction, reference),
    }


@functools.cache
def _bert_scorer(model_type: str, num_layers: int | None):
    from bert_score import BERTScorer

    # BERTScorer holds the model that bert_score.score would reload on every call; same numbers.
    return BERTScorer(model_type=model_type, num_layers=num_layers, lang="en", rescale_with_baseline=False)


def bert_f1(
    predictions: Sequence[str], references: Sequence[str], model_type: str, num_layers: int | None
) -> list[float]:
    """BERTScore F1 per pair, in one batched call; pairs must be non-empty (bert-score fails on "")."""
    if not predictions:
        return []
    _, _, f1 = _bert_scorer(model_type, num_layers).score(list(predictions), list(references))
    return [float(value) for value in f1.tolist()]


@functools.cache
def _embedder(model: str):
    from clag.embed import Embedder

    return Embedder(model)


def sbert_cosine(predictions: Sequence[str], references: Sequence[str], model: str) -> list[float]:
    """Cosine of sentence embeddings per pair (all-MiniLM-L6-v2 in the authors' code), batched."""
    if not predictions:
        return []
    vectors = _embedder(model).encode([*predictions, *references])
    count = len(predictions)
    return [float(value) for value in (vectors[:count] * vectors[count:]).sum(axis=1)]


# ------------------------------------------------------------ LoCoMo official


def normalize_official(text: str) -> str:
    """LoCoMo's ``normalize_answer``: drop commas, lowercase, drop punctuation and a/an/the/and."""
    text = text.replace(",", "").lower().translate(_OFFICIAL_PUNCTUATION)
    return " ".join(_OFFICIAL_STOPWORDS.sub(" ", text).split())


@functools.cache
def _stemmer() -> PorterStemmer:
    return PorterStemmer()


def official_token_f1(prediction: str, reference: str) -> float:
    """LoCoMo's ``f1_score``: count-based F1 over stemmed normalised tokens."""
    stem = _stemmer().stem
    predicted = [stem(word) for word in normalize_official(prediction).split()]
    gold = [stem(word) for word in normalize_official(reference).split()]
    common = sum((Counter(predicted) & Counter(gold)).values())
    if not common:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def official_multi_f1(prediction: str, reference: str) -> float:
    """LoCoMo's ``f1`` for multi-hop: each comma-separated gold part takes its best predicted part."""
    predicted = [part.strip() for part in prediction.split(",")]
    gold = [part.strip() for part in reference.split(",")]
    best = [max(official_token_f1(p, g) for p in predicted) for g in gold]
    return sum(best) / len(best)


def abstains(prediction: str) -> float:
    """LoCoMo's category-5 rule: 1 when the prediction says the answer is not mentioned / not available."""
    lowered = prediction.lower()
    return float(any(phrase in lowered for phrase in ABSTENTION_PHRASES))


def official_f1(prediction: str, reference: str, category: int | None) -> float:
    """LoCoMo's official per-question score, by category.

    Categories outside LoCoMo's 1-5 (HotpotQA and BioASQ rows, or none) get the
    plain stemmed token F1, as LoCoMo scores its single-answer categories.
    """
    if category == 5:
        return abstains(prediction)
    if category == 1:
        return official_multi_f1(prediction, reference)
    if category == 3:
        reference = reference.split(";")[0].strip()
    return official_token_f1(prediction, reference)
