"""The metric suite of the paper's tables, exact, named and tested.

Use::

    from clag.metrics import MetricSettings, aggregate_rows, score_rows
    scored = score_rows(rows, MetricSettings())
    metrics = aggregate_rows(scored, MetricSettings())

Answer metrics (``clag.metrics.answer``): the paper's token F1 (sets of
lowercased tokens, ``. , ! ?`` as spaces), exact match, BLEU-1, METEOR,
ROUGE-1/2/L, BERTScore F1, SBERT cosine, all as the CLAG authors compute
them; and LoCoMo's official F1 as ``f1_official``. Evidence metrics
(``clag.metrics.evidence``): E-Prec, E-Recall, E-F1, R@5, R@10, nDCG@10.
Aggregation (``clag.metrics.aggregate``): micro means overall and per
category (and, for LoCoMo, over categories 1-4 and 1-5 apart) with seeded
95% bootstrap intervals, latency mean/p50/p95, and a paired bootstrap test.
Agreement (``clag.metrics.agreement``): Cohen's kappa, for the two LLM-judge
prompts of ``clag.metrics.judge``. Every value is a fraction in [0, 1] (SBERT, and
BERTScore with a proxy model such as MiniLM, are cosines that can in
principle dip below 0; they are kept as the libraries return them); tables
multiply by 100.

LoCoMo category 5 (adversarial) is scored two ways, both always computed:

* ``paper`` (default, ``MetricSettings.adversarial_mode``): the reference is
  the adversarial (trap) answer and every answer metric compares the
  prediction with it. This is what the CLAG and A-mem code does
  (``QA.final_answer`` in their ``load_dataset.py``), and what the paper's
  numbers are. Note that it rewards choosing the trap answer, not
  abstaining.
* ``official``: LoCoMo's own scorer (``task_eval/evaluation.py``) counts the
  answer correct (1) when it says "not mentioned" or "no information
  available", else 0; this value then fills every headline answer metric of
  category-5 rows.

Whatever the mode, ``adversarial_official`` keeps LoCoMo's 0/1 for each
category-5 row and ``f1_official`` is LoCoMo's full official score (its F1
for categories 1-4, the 0/1 rule for category 5).

BERTScore depends on its model: the paper's is roberta-large (layer 17),
which needs the Hub; offline the shipped all-MiniLM-L6-v2 (layer 6) is a
proxy, and ``aggregate_rows(...)["settings"]`` records which one was used.
"""

from clag.metrics.aggregate import JUDGE_KEYS, aggregate_rows, answer_tables, paired_bootstrap, spread, summarize
from clag.metrics.agreement import cohen_kappa
from clag.metrics.answer import ANSWER_KEYS
from clag.metrics.evidence import EVIDENCE_KEYS, evidence_scores
from clag.metrics.scoring import score_rows
from clag.metrics.settings import MetricSettings

__all__ = [
    "ANSWER_KEYS",
    "EVIDENCE_KEYS",
    "JUDGE_KEYS",
    "MetricSettings",
    "aggregate_rows",
    "answer_tables",
    "cohen_kappa",
    "evidence_scores",
    "paired_bootstrap",
    "score_rows",
    "spread",
    "summarize",
]
