"""Which models and conventions a scoring run uses, and how they are reported.

BERTScore values depend on the model and the layer it reads, so the model a
run actually used is written next to its numbers: the paper's scores come
from bert-score's English default (roberta-large, layer 17); offline we can
only load the shipped all-MiniLM-L6-v2 (layer 6), a proxy whose values are
not comparable with the paper's.
"""

from __future__ import annotations

from dataclasses import dataclass

from clag.assets import resolve_embedder_path

ADVERSARIAL_MODES = ("paper", "official")
PAPER_BERT_MODEL = "roberta-large"
# The shipped MiniLM has 6 layers; bert-score has no default layer for a local path.
_OFFLINE_BERT_LAYERS = {"offline:minilm": 6}


@dataclass(frozen=True)
class MetricSettings:
    """Settings of one scoring run.

    Attributes:
        bert_model: ``roberta-large`` (the paper's, needs the Hub),
            ``offline:minilm`` (the shipped MiniLM), a local directory or a Hub id.
        bert_num_layers: Layer whose embeddings BERTScore compares; None takes
            bert-score's default for the model (17 for roberta-large, 6 for
            ``offline:minilm``).
        adversarial_mode: Which LoCoMo category-5 scoring feeds the headline
            answer metrics: ``paper`` or ``official`` (see ``clag.metrics``).
        bootstrap_samples: Resamples for every 95% interval.
        seed: Seed of the bootstrap resampling.
        sbert_model: Sentence embedder of the SBERT cosine.
    """

    bert_model: str = "offline:minilm"
    bert_num_layers: int | None = None
    adversarial_mode: str = "paper"
    bootstrap_samples: int = 1000
    seed: int = 0
    sbert_model: str = "offline:minilm"

    def __post_init__(self) -> None:
        if self.adversarial_mode not in ADVERSARIAL_MODES:
            raise ValueError(f"adversarial_mode must be one of {ADVERSARIAL_MODES}, got {self.adversarial_mode!r}")
        if self.bootstrap_samples < 1:
            raise ValueError(f"bootstrap_samples must be >= 1, got {self.bootstrap_samples}")

    def bert_spec(self) -> tuple[str, int | None]:
        """``(model_type, num_layers)`` as bert-score takes them (path resolved, layers filled in)."""
        layers = self.bert_num_layers
        if layers is None:
            layers = _OFFLINE_BERT_LAYERS.get(self.bert_model)
        return resolve_embedder_path(self.bert_model), layers

    def describe(self) -> dict:
        """What the results must carry so nobody mistakes a proxy BERTScore for the paper's."""
        from bert_score.utils import get_hash, model2layers

        model_type, layers = self.bert_spec()
        layers = layers if layers is not None else model2layers.get(model_type)
        return {
            "bert_model": self.bert_model,
            "bert_model_type": model_type,
            "bert_num_layers": layers,
            "bert_is_paper_model": self.bert_model == PAPER_BERT_MODEL and layers == model2layers[PAPER_BERT_MODEL],
            "bert_hash": get_hash(model_type, layers, False, False, False, False),
            "sbert_model": self.sbert_model,
            "adversarial_mode": self.adversarial_mode,
            "bootstrap_samples": self.bootstrap_samples,
            "seed": self.seed,
        }
