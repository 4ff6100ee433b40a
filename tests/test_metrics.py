"""Metric values against hand-computed numbers and the reference libraries."""

from __future__ import annotations

import math

import numpy as np
import pytest
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu
from nltk.translate.meteor_score import meteor_score
from rouge_score import rouge_scorer

from clag.assets import install_wordnet, resolve_embedder_path
from clag.metrics import MetricSettings, aggregate_rows, evidence_scores, paired_bootstrap, score_rows, summarize
from clag.metrics.aggregate import answer_tables
from clag.metrics.answer import (
    bert_f1,
    bleu1,
    meteor,
    normalize_official,
    official_f1,
    rouge,
    sbert_cosine,
    token_f1,
)
from clag.metrics.scoring import answer_text

FAST = MetricSettings(bootstrap_samples=200)
MINILM = resolve_embedder_path("offline:minilm")

# ------------------------------------------------------------ paper token F1


@pytest.mark.parametrize(
    ("prediction", "reference", "expected"),
    [
        ("The cat sat.", "the cat, sat on the mat!", 0.75),  # punctuation to spaces; p=1, r=3/5
        ("PARIS", "paris", 1.0),  # case
        ("Yes!", "yes?", 1.0),
        ("cat cat cat dog", "cat", 2 / 3),  # sets: repeats count once; p=1/2, r=1
        ("time: 5pm", "time 5pm", 0.5),  # ':' is not among the authors' four marks
        ("apples ; bananas", "apples; bananas", 0.4),  # list answers: ';' stays a token / attached
        ("dog", "cat", 0.0),
    ],
)
def test_paper_token_f1_hand_values(prediction, reference, expected):
    assert token_f1(prediction, reference) == pytest.approx(expected, abs=1e-12)


def test_answer_text_follows_the_authors_emptiness_test():
    assert answer_text(2022) == "2022"  # integer answers are stringified
    assert answer_text("  Paris \n") == "Paris"
    assert answer_text(None) == answer_text("") == answer_text(0) == ""


# ------------------------------------------------------ lexical vs libraries


def _nltk_bleu1(hypothesis: list[str], reference: list[str]) -> float:
    return sentence_bleu([reference], hypothesis, weights=(1, 0, 0, 0), smoothing_function=SmoothingFunction().method1)


@pytest.mark.parametrize(
    ("prediction", "reference", "hyp_tokens", "ref_tokens"),
    [
        ("the cat", "The cat sat", ["the", "cat"], ["the", "cat", "sat"]),
        ("Paris.", "Paris", ["paris", "."], ["paris"]),
        ("Yes, she did.", "yes", ["yes", ",", "she", "did", "."], ["yes"]),
        ("7 May 2023", "7 may, 2023", ["7", "may", "2023"], ["7", "may", ",", "2023"]),
        ("a ; b", "a;b", ["a", ";", "b"], ["a", ";", "b"]),
    ],
)
def test_bleu1_matches_nltk_on_lowercased_word_tokens(prediction, reference, hyp_tokens, ref_tokens):
    assert bleu1(prediction, reference) == pytest.approx(_nltk_bleu1(hyp_tokens, ref_tokens), abs=1e-12)


def test_bleu1_hand_values():
    assert bleu1("the cat", "the cat sat") == pytest.approx(math.exp(1 - 3 / 2), abs=1e-9)  # brevity penalty only
    assert bleu1("Paris.", "Paris") == pytest.approx(0.5, abs=1e-12)  # 1 of 2 unigrams


@pytest.mark.parametrize(
    ("prediction", "reference"),
    [("the cats sat on a mat", "The cat sat on the mat"), ("running late", "she runs late"), ("2022", "2022")],
)
def test_meteor_matches_nltk_on_whitespace_tokens(prediction, reference):
    install_wordnet()
    expected = meteor_score([reference.split()], prediction.split())
    assert meteor(prediction, reference) == pytest.approx(expected, abs=1e-12)


def test_meteor_single_token_match_is_half():
    # fmean 1 times (1 - 0.5 * (1 chunk / 1 match) ** 3)
    assert meteor("2022", "2022") == pytest.approx(0.5)


def test_rouge_matches_rouge_score_with_stemmer():
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    for prediction, reference in [("the cats sat", "the cat sat"), ("a dog barked loudly", "the dog barks")]:
        expected = {name: value.fmeasure for name, value in scorer.score(reference, prediction).items()}
        assert rouge(prediction, reference) == pytest.approx(expected, abs=1e-12)
    assert rouge("the cats sat", "the cat sat")["rougeL"] == pytest.approx(1.0)  # stemmer: cats -> cat


# ----------------------------------------------------------------- official


def test_normalize_official_matches_locomo():
    assert normalize_official("The cat, and a Dog!") == "cat dog"


@pytest.mark.parametrize(
    ("prediction", "reference", "category", "expected"),
    [
        ("The cats ran", "cat running", 4, 0.5),  # stems: cat ran / cat run
        ("cat cat cat dog", "cat", 2, 0.4),  # counts, not sets: p=1/4, r=1
        ("Paris", "Paris, London", 1, 0.5),  # multi-hop: mean over gold parts of the best predicted part
        ("London, Paris", "Paris, London", 1, 1.0),
        ("hiking", "hiking; camping", 3, 1.0),  # category 3: gold before the first ';'
        ("hiking", "hiking; camping", 4, 2 / 3),  # elsewhere ';' is punctuation
        ("Not mentioned in the conversation", "a red car", 5, 1.0),
        ("No information available.", "a red car", 5, 1.0),
        ("a red car", "a red car", 5, 0.0),  # abstention rule ignores the trap answer
        ("Paris", "Paris France", None, 2 / 3),  # other datasets: plain stemmed F1
        ("", "Paris", 4, 0.0),
    ],
)
def test_official_f1_hand_values(prediction, reference, category, expected):
    assert official_f1(prediction, reference, category) == pytest.approx(expected, abs=1e-12)


# ------------------------------------------------------------------- neural


def test_bert_f1_batched_matches_bert_score_per_pair():
    from bert_score import score

    predictions = ["Paris", "the cat sat", "hello world. bye."]
    references = ["Paris France", "a cat sat down", "hello"]
    batched = bert_f1(predictions, references, MINILM, 6)
    single = [
        score([p], [r], model_type=MINILM, num_layers=6, lang="en")[2].item() for p, r in zip(predictions, references)
    ]
    assert batched == pytest.approx(single, abs=1e-5)
    assert bert_f1(["same words"], ["same words"], MINILM, 6)[0] == pytest.approx(1.0, abs=1e-5)


def test_sbert_cosine_matches_sentence_transformers():
    from sentence_transformers import SentenceTransformer, util

    model = SentenceTransformer(MINILM)
    predictions, references = ["a red car", "he went to Paris"], ["the automobile is red", "he travelled to France"]
    expected = [util.cos_sim(model.encode(p), model.encode(r)).item() for p, r in zip(predictions, references)]
    assert sbert_cosine(predictions, references, "offline:minilm") == pytest.approx(expected, abs=1e-5)


# ------------------------------------------------------------- score_rows


def test_score_rows_empty_sides_score_zero_and_integers_score():
    rows = [
        {"prediction": "", "reference": "Paris"},
        {"prediction": "   ", "reference": "Paris"},  # whitespace only: bert-score would fail on it
        {"prediction": "Paris", "reference": None},
        {"prediction": "In 2022", "reference": 2022, "category": 2},
    ]
    scored = score_rows(rows, FAST)
    for row in scored[:3]:
        assert all(row[key] == 0.0 for key in ("f1", "bleu1", "meteor", "bert_f1", "rougeL", "exact_match", "sbert"))
    assert scored[3]["f1"] == pytest.approx(2 / 3)
    assert scored[3]["reference"] == 2022  # input keys kept as they were
    assert scored[3]["e_f1"] is None  # no gold evidence


def test_adversarial_modes_choose_the_headline_for_category_5_only():
    rows = [
        {"prediction": "Not mentioned in the conversation", "reference": "a red car", "category": 5},
        {"prediction": "a red car", "reference": "a red car", "category": 5},
        {"prediction": "a red car", "reference": "a red car", "category": 4},
    ]
    paper = score_rows(rows, FAST)
    official = score_rows(rows, MetricSettings(adversarial_mode="official", bootstrap_samples=200))
    assert [row["f1"] for row in paper] == [0.0, 1.0, 1.0]
    assert [row["f1"] for row in official] == [1.0, 0.0, 1.0]
    assert [row["bleu1"] for row in official] == [1.0, 0.0, 1.0]
    for scored in (paper, official):
        assert [row["adversarial_official"] for row in scored] == [1.0, 0.0, None]
        assert [row["f1_official"] for row in scored] == [1.0, 0.0, 1.0]


def test_score_rows_requires_prediction_and_reference():
    with pytest.raises(ValueError, match="row 1 lacks reference"):
        score_rows([{"prediction": "a", "reference": "a"}, {"prediction": "a"}], FAST)


def test_settings_reject_unknown_mode_and_record_the_bert_model():
    with pytest.raises(ValueError, match="adversarial_mode"):
        MetricSettings(adversarial_mode="strict")
    offline = MetricSettings().describe()
    assert offline["bert_model_type"] == MINILM and offline["bert_num_layers"] == 6
    assert not offline["bert_is_paper_model"]
    paper = MetricSettings(bert_model="roberta-large").describe()
    assert paper["bert_num_layers"] == 17 and paper["bert_is_paper_model"]
    assert paper["bert_hash"].startswith("roberta-large_L17_no-idf")


# ----------------------------------------------------------------- evidence


def test_evidence_metrics_hand_values():
    ranked = list("abcdefghijkl")  # gold c at rank 3, k at rank 11, z never retrieved
    scores = evidence_scores(ranked, ["c", "k", "z"])
    ideal = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert scores["e_prec"] == pytest.approx(2 / 12)
    assert scores["e_recall"] == pytest.approx(2 / 3)
    assert scores["e_f1"] == pytest.approx(2 * (1 / 6) * (2 / 3) / (1 / 6 + 2 / 3))
    assert scores["r5"] == pytest.approx(1 / 3)
    assert scores["r10"] == pytest.approx(1 / 3)
    assert scores["ndcg10"] == pytest.approx((1 / math.log2(4)) / ideal)


def test_evidence_perfect_ranking_duplicates_and_missing():
    perfect = evidence_scores(["D1:2", "D1:3", "D9:9"], ["D1:3", "D1:2"])
    assert perfect["ndcg10"] == pytest.approx(1.0) and perfect["r5"] == 1.0
    assert perfect["e_prec"] == pytest.approx(2 / 3)
    duplicated = evidence_scores(["x", "c", "c"], ["c"])  # a repeated id counts once, at its first rank
    assert duplicated["e_prec"] == pytest.approx(0.5)
    assert duplicated["ndcg10"] == pytest.approx(1 / math.log2(3))
    assert evidence_scores(None, ["c"]) == dict.fromkeys(duplicated, 0.0)
    assert set(evidence_scores(["c"], []).values()) == {None}


# ---------------------------------------------------------------- aggregate


def test_summarize_is_seeded_and_brackets_the_mean():
    values = list(np.random.default_rng(1).random(60))
    first, again = summarize(values, 500, seed=3), summarize(values, 500, seed=3)
    assert first == again
    assert first["ci_low"] < first["mean"] < first["ci_high"] and first["n"] == 60
    assert summarize(values, 500, seed=4) != first
    assert summarize([0.5] * 5, 100)["ci_low"] == summarize([0.5] * 5, 100)["ci_high"] == 0.5


def test_paired_bootstrap():
    a = [1.0, 0.0, 1.0, 1.0, 0.0] * 10
    same = paired_bootstrap(a, a, samples=500)
    assert same["mean_diff"] == 0.0 and same["p_value"] == 1.0
    better = paired_bootstrap([1.0] * 50, [0.0] * 25 + [1.0] * 25, samples=999, seed=7)
    assert better["mean_diff"] == pytest.approx(0.5) and better["p_value"] == pytest.approx(1 / 1000)
    assert better["ci_low"] > 0 and better == paired_bootstrap([1.0] * 50, [0.0] * 25 + [1.0] * 25, 999, 7)
    with pytest.raises(ValueError, match="same questions"):
        paired_bootstrap([1.0], [1.0, 0.0])


def test_aggregate_rows_overall_categories_evidence_latency():
    rows = [
        {
            "prediction": "Paris",
            "reference": "Paris",
            "category": 1,
            "retrieved_ids": ["a"],
            "evidence_ids": ["a"],
            "retrieval_ms": 10.0,
            "e2e_ms": 100.0,
            "context_chars": 1000,
        },
        {
            "prediction": "London",
            "reference": "Paris",
            "category": 1,
            "retrieved_ids": ["b"],
            "evidence_ids": ["a"],
            "retrieval_ms": 20.0,
            "e2e_ms": 200.0,
            "context_chars": 2000,
        },
        {
            "prediction": "Not mentioned",
            "reference": "a red car",
            "category": 5,
            "retrieved_ids": ["a"],
            "evidence_ids": [],
            "retrieval_ms": 30.0,
            "e2e_ms": 300.0,
            "context_chars": 3000,
        },
    ]
    metrics = aggregate_rows(score_rows(rows, FAST), FAST)
    assert metrics["overall"]["f1"]["mean"] == pytest.approx(1 / 3) and metrics["overall"]["f1"]["n"] == 3
    assert metrics["by_category"]["1"]["f1"]["mean"] == pytest.approx(0.5)
    assert metrics["by_category"]["5"]["adversarial_official"]["mean"] == 1.0
    assert "adversarial_official" not in metrics["by_category"]["1"]
    assert metrics["evidence"]["n_with_evidence"] == 2 and metrics["evidence"]["n_without_evidence"] == 1
    assert metrics["evidence"]["overall"]["r5"]["mean"] == pytest.approx(0.5)
    assert metrics["latency"]["retrieval_ms"] == {"mean": 20.0, "p50": 20.0, "p95": pytest.approx(29.0), "n": 3}
    assert metrics["context_chars"]["mean"] == 2000.0
    assert metrics["settings"]["adversarial_mode"] == "paper" and metrics["settings"]["bootstrap_samples"] == 200


def test_a_j_is_reported_only_for_category_sets_the_judge_covered():
    """LoCoMo's judge skips category 5: J appears over 1-4 and per judged category, never over 1-5, where
    it would repeat the 1-4 value under a label that covers more questions; an unclear verdict is no skip."""
    judged = [{"category": c, "f1": 1.0, "j_strict": v, "judge": {"strict": {}}} for c, v in ((1, 1.0), (2, None))]
    skipped = {"category": 5, "f1": 0.0, "j_strict": None, "judge": {"skipped": "category 5 is not judged"}}
    tables = answer_tables([*judged, skipped], FAST, "locomo")
    assert tables["overall_sets"]["1-4"]["j_strict"]["n"] == 1 and tables["by_category"]["1"]["j_strict"]["n"] == 1
    assert "j_strict" not in tables["overall"] and "j_strict" not in tables["overall_sets"]["1-5"]
    assert tables["overall"]["f1"]["n"] == 3


def test_latency_percentiles_match_numpy():
    values = [float(v) for v in range(1, 101)]
    scored = [{"retrieval_ms": v, "e2e_ms": 2 * v} for v in values]
    latency = aggregate_rows(scored, FAST)["latency"]
    assert latency["retrieval_ms"]["p50"] == pytest.approx(50.5)
    assert latency["retrieval_ms"]["p95"] == pytest.approx(95.05)
    assert latency["e2e_ms"]["mean"] == pytest.approx(101.0)
