"""Dataset loaders, slicing, error messages, and the BioASQ derivation / fetch checks.

Counts are those of ``data/README.md``; no test touches the network.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
import yaml

from clag.data import DATASETS, DatasetError, bioasq, dataset_path, episode_fingerprint, fetch, load_episodes

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _needs_data(data_dir: Path) -> None:
    """Every test here reads the data root of CLAG_DATA_DIR; the conftest fixture names what is missing."""


# --- counts ------------------------------------------------------------------------------------------------

LOCOMO_TABLE = {  # sample_id: (sessions, turns, questions), README section 1
    "conv-26": (19, 419, 199), "conv-30": (19, 369, 105), "conv-41": (32, 663, 193), "conv-42": (29, 629, 260),
    "conv-43": (29, 680, 242), "conv-44": (28, 675, 158), "conv-47": (31, 689, 190), "conv-48": (30, 681, 239),
    "conv-49": (25, 509, 196), "conv-50": (30, 568, 204),
}


def test_locomo_counts_match_the_readme():
    episodes = load_episodes("locomo")
    table = {ep.id: (len({i.session for i in ep.items}), len(ep.items), len(ep.questions)) for ep in episodes}
    assert table == LOCOMO_TABLE
    assert sum(len(ep.items) for ep in episodes) == 5882
    categories = Counter(q.category for ep in episodes for q in ep.questions)
    assert categories == {1: 282, 2: 321, 3: 96, 4: 841, 5: 446}
    assert all(ep.dataset == "locomo" for ep in episodes)


def test_hotpotqa_counts_match_the_readme():
    episodes = load_episodes("hotpotqa")
    assert [len(ep.items) for ep in episodes] == [812, 769, 801, 890, 889, 899, 864, 808, 872, 871]
    assert [len(ep.questions) for ep in episodes] == [20] * 10
    assert {q.category for ep in episodes for q in ep.questions} == {4}
    assert all(q.evidence_ids for ep in episodes for q in ep.questions)
    first = episodes[0].items[19]
    assert (first.id, first.speaker, first.timestamp, first.session) == ("0:19", "System", "2020-01-01 00:00:00",
                                                                         "session_0")
    assert first.text.startswith("Title: ")


def test_bioasq_variants_match_the_readme():
    gold = load_episodes("bioasq")
    assert [len(ep.items) for ep in gold] == [300, 326, 362, 134, 142, 415, 265, 238, 282, 260]
    assert Counter(q.category for ep in gold for q in ep.questions) == {4: 140, 6: 60}
    assert all(q.evidence_ids for ep in gold for q in ep.questions)
    everything = load_episodes("bioasq", variant="all_snippets")
    assert sum(len(ep.items) for ep in everything) == 2775
    assert not any(q.evidence_ids for ep in everything for q in ep.questions)
    assert [q.text for q in everything[0].questions] == [q.text for q in gold[0].questions]


# --- item and question content -----------------------------------------------------------------------------


def test_sessions_come_in_numeric_order():
    conv41 = load_episodes("locomo", episodes=3)[2]
    sessions = list(dict.fromkeys(item.session for item in conv41.items))
    assert sessions == [f"session_{n}" for n in range(1, 33)]  # session_10 after session_9, not after session_1
    after_nine = conv41.items[[i.session for i in conv41.items].index("session_10")]
    assert after_nine.id == "D10:1"
    assert after_nine.timestamp != conv41.items[0].timestamp


def test_image_turns_follow_the_authors_loader(data_dir: Path):
    raw = json.loads((data_dir / "locomo" / "locomo10.json").read_text())[0]["conversation"]
    turns = {t["dia_id"]: t for key, v in raw.items() if isinstance(v, list) for t in v}
    items = {i.id: i for i in load_episodes("locomo", episodes=1)[0].items}
    with_url = next(t for t in turns.values() if "img_url" in t and "blip_caption" in t)
    assert items[with_url["dia_id"]].text == f"[Image: {with_url['blip_caption']}] {with_url['text']}"
    caption_only = next(t for t in turns.values() if "blip_caption" in t and "img_url" not in t)
    assert items[caption_only["dia_id"]].text == caption_only["text"]


def test_questions_carry_answers_ids_and_repaired_evidence(caplog: pytest.LogCaptureFixture):
    caplog.set_level("INFO", logger="clag.data.loaders")
    episodes = load_episodes("locomo")
    questions = {q.id: q for ep in episodes for q in ep.questions}
    assert questions["conv-26:q0"].answer == "7 May 2023"
    assert questions["conv-26:q37"].evidence_ids == ("D8:6", "D9:17")  # was "D8:6; D9:17"
    assert "D11:26" in questions["conv-43:q18"].evidence_ids  # was "D:11:26"
    assert "D30:5" in questions["conv-50:q69"].evidence_ids  # was "D30:05"
    for ep in episodes:  # every evidence id names an item of its own episode
        ids = {item.id for item in ep.items}
        assert all(set(q.evidence_ids) <= ids for q in ep.questions)
    adversarial = [q for q in questions.values() if q.category == 5]
    assert all(q.adversarial_answer and q.reference == q.adversarial_answer for q in adversarial)
    assert sum(q.answer == "" for q in adversarial) == 444
    assert all(isinstance(q.answer, str) and q.answer for q in questions.values() if q.category != 5)
    assert "dropped 3 evidence ids" in caplog.text and "conv-42:q88 'D'" in caplog.text


# --- slicing -----------------------------------------------------------------------------------------------


def test_item_limit_keeps_only_questions_answerable_from_the_kept_items():
    full = load_episodes("locomo", episodes=2)
    sliced = load_episodes("locomo", episodes=2, items=60, questions=5)
    assert [ep.id for ep in sliced] == [ep.id for ep in full]
    for whole, part in zip(full, sliced):
        assert part.items == whole.items[:60]
        kept = {i.id for i in part.items}
        eligible = [q for q in whole.questions if q.evidence_ids and set(q.evidence_ids) <= kept]
        assert part.questions == eligible[:5] and part.questions


def test_questions_without_evidence_are_kept_only_without_an_item_limit():
    no_evidence = [q for ep in load_episodes("locomo") for q in ep.questions if not q.evidence_ids]
    assert len(no_evidence) == 4
    assert not [q for ep in load_episodes("locomo", items=10_000) for q in ep.questions if not q.evidence_ids]
    with pytest.raises(DatasetError, match="keeps no question"):
        load_episodes("bioasq", variant="all_snippets", items=100)


def test_category_filter_and_question_limit():
    episodes = load_episodes("bioasq", categories=[6], questions=3)
    assert all(q.category == 6 for ep in episodes for q in ep.questions)
    assert all(len(ep.questions) <= 3 for ep in episodes)
    with pytest.raises(DatasetError, match=r"no question of categories \[6\]"):
        load_episodes("locomo", categories=[6])


@pytest.mark.parametrize("limits", [{"episodes": 0}, {"items": -1}, {"questions": -2}])
def test_bad_limits_are_rejected(limits: dict[str, int]):
    with pytest.raises(DatasetError, match="must be at least"):
        load_episodes("hotpotqa", **limits)


def test_fingerprint_is_stable_and_tracks_the_slice():
    first = load_episodes("hotpotqa", episodes=1)[0]
    again = load_episodes("hotpotqa", episodes=1)[0]
    cut = load_episodes("hotpotqa", episodes=1, items=200)[0]
    assert episode_fingerprint(first) == episode_fingerprint(again)
    assert len(episode_fingerprint(first)) == 64
    assert episode_fingerprint(cut) != episode_fingerprint(first)


# --- errors ------------------------------------------------------------------------------------------------


def test_truncated_file_names_the_file(data_dir: Path, tmp_path: Path):
    target = tmp_path / "locomo" / "locomo10.json"
    target.parent.mkdir()
    target.write_bytes((data_dir / "locomo" / "locomo10.json").read_bytes()[:100_000])
    with pytest.raises(DatasetError) as error:
        load_episodes("locomo", tmp_path)
    message = str(error.value)
    assert str(target) in message and "malformed JSON" in message and "\n" not in message


def _write_sample(root: Path, sample: dict) -> None:
    target = root / "locomo" / "locomo10.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps([sample]))


def _sample() -> dict:
    return {
        "sample_id": "conv-x",
        "conversation": {"speaker_a": "A", "speaker_b": "B", "session_1_date_time": "today",
                         "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "hi"}]},
        "qa": [{"question": "q?", "answer": 7, "evidence": ["D1:1"], "category": 4},
               {"answer": "x", "evidence": [], "category": 1}],
    }


def test_missing_field_names_file_record_and_field(tmp_path: Path):
    _write_sample(tmp_path, _sample())
    with pytest.raises(DatasetError) as error:
        load_episodes("locomo", tmp_path)
    message = str(error.value)
    assert "locomo10.json" in message and "sample conv-x, qa[1]" in message and "'question'" in message
    assert "\n" not in message


def test_missing_session_date_and_wrong_type_are_named(tmp_path: Path):
    sample = _sample()
    del sample["conversation"]["session_1_date_time"]
    _write_sample(tmp_path, sample)
    with pytest.raises(DatasetError, match=r"sample conv-x, conversation: missing field 'session_1_date_time'"):
        load_episodes("locomo", tmp_path)
    sample = _sample()
    sample["qa"][1]["question"], sample["qa"][1]["category"] = "q2?", "4"
    _write_sample(tmp_path, sample)
    with pytest.raises(DatasetError, match=r"qa\[1\]: field 'category' should be int, got str"):
        load_episodes("locomo", tmp_path)


def test_integer_answers_become_strings(tmp_path: Path):
    sample = _sample()
    sample["qa"][1]["question"] = "q2?"
    _write_sample(tmp_path, sample)
    episode = load_episodes("locomo", tmp_path)[0]
    assert [q.answer for q in episode.questions] == ["7", "x"]
    assert [q.id for q in episode.questions] == ["conv-x:q0", "conv-x:q1"]


def test_missing_file_and_missing_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    with pytest.raises(DatasetError, match="file not found.*fetch_data.py") as error:
        load_episodes("hotpotqa", tmp_path)
    assert str(tmp_path / "hotpotqa" / "hotpot_200.json") in str(error.value)
    monkeypatch.delenv("CLAG_DATA_DIR")
    with pytest.raises(DatasetError, match="set CLAG_DATA_DIR"):
        load_episodes("hotpotqa")


def test_unknown_names_get_a_suggestion():
    with pytest.raises(DatasetError, match="did you mean 'locomo'"):
        load_episodes("locmo")
    with pytest.raises(DatasetError, match="did you mean 'gold_context'"):
        load_episodes("bioasq", variant="gold-context")


# --- configs -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_dataset_configs_name_a_loadable_variant(name: str):
    config = yaml.safe_load((REPO / "configs" / "dataset" / f"{name}.yaml").read_text())
    assert config["name"] == name
    assert dataset_path(name, variant=config["variant"]).is_file()


# --- BioASQ derivation and fetch ---------------------------------------------------------------------------


def test_sentence_split_and_answer_flattening():
    assert bioasq.split_sentences("  One.  Two?\nThree!Four ") == ["One.", "Two?", "Three!Four"]
    assert bioasq.split_sentences(" \n ") == []
    assert bioasq.answer_string([["casirivimab", "REGN10933"], ["imdevimab"]]) == "casirivimab ; imdevimab"
    assert bioasq.answer_string("yes") == ""


@pytest.mark.parametrize("gold_context", [False, True])
def test_bioasq_derivation_reproduces_the_shared_files(data_dir: Path, gold_context: bool):
    golden = (data_dir / "bioasq" / "Task10BGoldenEnriched").glob("10B*_golden.json")
    built = bioasq.dump_samples(bioasq.build_chunked(bioasq.read_golden(golden), gold_context=gold_context))
    assert built == (data_dir / fetch.DERIVED[gold_context].path).read_bytes()


def test_sha256_check(data_dir: Path, tmp_path: Path):
    assert fetch.fetch(data_dir, check_only=True) == []
    entry = fetch.DOWNLOADS[0]
    (tmp_path / entry.path).parent.mkdir(parents=True)
    (tmp_path / entry.path).write_bytes((data_dir / entry.path).read_bytes() + b" ")
    problems = fetch.fetch(tmp_path, check_only=True)
    assert problems[0].startswith(f"{entry.path}: sha256 ")
    assert len(problems) == len(fetch.DOWNLOADS) + len(fetch.DERIVED)  # the rest are missing


def test_fetch_without_network_builds_bioasq_and_names_what_it_missed(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    shutil.copytree(data_dir / "bioasq" / "Task10BGoldenEnriched", tmp_path / "bioasq" / "Task10BGoldenEnriched")

    def offline(*args, **kwargs):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    assert fetch.main(["--dest", str(tmp_path)]) == 1
    failed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("FAILED")]
    assert len(failed) == 2
    assert "locomo/locomo10.json: could not download" in failed[0] and "no network" in failed[0]
    assert "hotpotqa/hotpot_200.json" in failed[1]
    for entry in fetch.DERIVED.values():
        assert (tmp_path / entry.path).read_bytes() == (data_dir / entry.path).read_bytes()


def test_fetch_script_checks_a_complete_root(data_dir: Path):
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "fetch_data.py"), "--check", "--dest",
                           str(data_dir)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "all 10 files verified" in done.stderr


@pytest.mark.parametrize("as_url", [False, True])
def test_fetch_from_a_local_mirror_fills_a_fresh_root(data_dir: Path, tmp_path: Path, as_url: bool):
    """``--source`` reads a copy laid out like the data root (what `make data DATA_SOURCE=...` does offline)."""
    source = data_dir.as_uri() if as_url else str(data_dir)
    dest = tmp_path / "data"
    assert fetch.main(["--dest", str(dest), "--source", source]) == 0
    assert fetch.fetch(dest, check_only=True) == []
    # a folder is resolved (CI may reach the data through a symlink), a URL taken as given
    base = data_dir.as_uri() if as_url else data_dir.resolve().as_uri()
    assert fetch.source_url(fetch.DOWNLOADS[0], source) == f"{base}/locomo/locomo10.json"


def test_fetch_from_a_mirror_keeps_no_file_with_a_wrong_sha256(data_dir: Path, tmp_path: Path):
    mirror = tmp_path / "mirror"
    shutil.copytree(data_dir, mirror)
    (mirror / fetch.DOWNLOADS[0].path).chmod(0o644)
    (mirror / fetch.DOWNLOADS[0].path).write_bytes(b"[]")
    problems = fetch.fetch(tmp_path / "data", source=mirror)
    assert problems == [f"{fetch.DOWNLOADS[0].path}: downloaded file has sha256 "
                        f"{fetch.sha256_bytes(b'[]')}, expected {fetch.DOWNLOADS[0].sha256}; not saved"]
    assert not (tmp_path / "data" / fetch.DOWNLOADS[0].path).exists()
