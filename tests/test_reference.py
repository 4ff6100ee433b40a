"""The reference scale: the slices its configs promise, and a resume path that reuses committed calls."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from omegaconf import OmegaConf

from clag.config import compose_config
from clag.data import load_episodes

ROOT = Path(__file__).resolve().parent.parent


def _compose(overrides: list[str]):
    return compose_config(overrides, return_hydra_config=True)


def _episodes(cfg, data_dir: Path):
    limit = OmegaConf.to_container(cfg.limit, resolve=True)
    return load_episodes(cfg.dataset.name, data_dir, variant=cfg.dataset.get("variant"), **limit)


def test_reference_slices_hold_the_questions_the_configs_state(data_dir: Path) -> None:
    locomo = _episodes(_compose(["experiment=reference", "dataset=locomo"]), data_dir)
    assert [e.id for e in locomo] == ["conv-26", "conv-30", "conv-41", "conv-42", "conv-43"]
    assert all(len(e.items) == 150 for e in locomo)
    categories = Counter(q.category for e in locomo for q in e.questions)
    assert sum(categories.values()) == 265
    assert dict(categories) == {1: 22, 2: 51, 3: 13, 4: 113, 5: 66}

    bioasq = _episodes(_compose(["experiment=reference", "dataset=bioasq"]), data_dir)
    assert [len(e.items) for e in bioasq] == [265, 282, 260]
    assert Counter(q.category for e in bioasq for q in e.questions) == {4: 38, 6: 22}


def test_the_corrected_reference_adds_hotpotqa_and_growth_checkpoints(data_dir: Path) -> None:
    hotpotqa = _episodes(_compose(["experiment=reference_corrected", "dataset=hotpotqa"]), data_dir)
    assert [e.id for e in hotpotqa] == ["1", "5", "7", "8", "9"] and all(len(e.items) == 300 for e in hotpotqa)
    assert [len(e.questions) for e in hotpotqa] == [8, 7, 8, 8, 8]
    grown = [_episodes(_compose(["experiment=reference_growth", f"limit.items={n}"]), data_dir) for n in (150, 1000)]
    assert [e.id for e in grown[0]] == ["conv-26", "conv-30"]
    assert [len(e.items) for e in grown[1]] == [419, 369]  # every turn
    first, every = ({q.id for e in episodes for q in e.questions} for episodes in grown)
    assert first < every  # the first checkpoint's questions are asked again at the last


def test_the_corrected_conventions_and_the_authors_code_settings() -> None:
    corrected = _compose(["experiment=reference_corrected", "method=clag"])
    assert corrected.model.prompt_format == "raw" and corrected.answer.json_instruction is False
    assert corrected.model.generation.max_new_tokens == 1000 and corrected.model.reject_truncated_json
    assert not corrected.model.backend.disable_any_whitespace and corrected.model.generation.temperature == 0
    assert corrected.model.backend.dtype == "float32"  # pinned, as the first reference pinned bfloat16
    authors = _compose(["experiment=reference_authors_code", "method=clag_authors_code"])
    assert (authors.model.generation.temperature, authors.model.generation.seed) == (0.7, 0)
    assert not authors.model.json_retry and authors.model.accept_placeholders
    assert not authors.model.reject_truncated_json
    system = authors.method.system
    assert (system.k_route, system.merge, system.invalid_route, system.strict_links) == (
        5, "per_cluster", "new_cluster", False)  # fmt: skip
    amem = _compose(["experiment=reference_authors_code", "method=amem_authors_code"])
    assert amem.method.system.strict_links is False


def test_reference_runs_publish_settings_and_pin_what_keys_the_cache() -> None:
    cfg = _compose(["experiment=reference", "method=clag"])
    assert (cfg.method.system.buffer_size, cfg.method.system.tau_split) == (100, 300)  # Table 8, not demo's
    assert cfg.model.engine == "vllm" and cfg.model.backend.dtype == "bfloat16"  # never `auto`
    assert cfg.cache.path == "results/reference/llm_cache.sqlite"
    assert cfg.paths.runs_dir == "results/reference/runs"
    ablations = _compose(["experiment=reference_ablations"])
    params = ablations.hydra.sweeper.params
    assert (params.dataset, params.method) == ("bioasq", "clag")
    assert set(params["+variant"].split(",")) == {"routing_cosine", "routing_kmeans", "global_evolution",
                                                    "global_retrieval"}


def test_committed_reference_cache_is_small_and_readable() -> None:
    """The shards a fresh clone imports to resume (kept under ~50 MB of repository growth)."""
    from clag.llm.cache_shards import read_shard, shard_paths

    shards = shard_paths(ROOT / "results" / "reference" / "llm_cache")
    assert sum(p.stat().st_size for p in shards) < 50e6
    for path in shards:
        for key, completion in read_shard(path):
            assert len(key) == 64 and completion.completion_tokens >= 0


def test_every_committed_reference_run_folder_is_one_a_reference_grid_names_today() -> None:
    """A change to the run hash (a new config key, say) would orphan the committed runs: a fresh
    clone's ``make reference`` would start them over. Such a change must rename them or leave
    the key out of the hash (clag/running/spec.py, UNHASHED)."""
    from clag.running.reference import GRIDS
    from clag.running.spec import RunSpec
    from clag.running.status import grid

    named = {(ROOT / RunSpec.from_config(compose_config(run)).run_dir).resolve() for g in GRIDS for run in grid(g)}
    committed = {  # runs/ and conventions/, not the superseded runs kept for their timings
        marker.parent.resolve()
        for marker in (ROOT / "results/reference").glob("*/*/*/*/*/*/run.json")
        if marker.parts[-7] != "runs_superseded"
    }
    assert committed and not committed - named, f"no reference grid names {sorted(committed - named)}"


def test_make_reference_runs_every_run_the_grids_name() -> None:
    """`make reference-status` walks the grids; `make reference` runs the sweeps: none may be left out."""
    from clag.running.reference import GRIDS, LARGER_BACKBONE, SWEEPS
    from clag.running.status import grid

    def runs(sweeps: tuple[tuple[str, ...], ...]) -> set[frozenset[str]]:
        return {frozenset(run) for sweep in sweeps for run in grid(sweep)}

    assert runs(GRIDS) == runs((*SWEEPS, LARGER_BACKBONE))


def test_make_reference_runs_the_sweeps_in_order_and_stops_at_the_first_failure(monkeypatch) -> None:
    import subprocess

    from clag.running import reference

    commands: list[list[str]] = []

    def run(command: list[str]) -> subprocess.CompletedProcess[str]:
        commands.append(command[4:])  # after `python -m clag.run -m`
        return subprocess.CompletedProcess(command, 3 if len(commands) == 2 else 0)

    monkeypatch.setattr(reference.subprocess, "run", run)
    assert reference.main(["hydra.launcher.n_jobs=2"]) == 3
    assert commands == [[*sweep, "hydra.launcher.n_jobs=2"] for sweep in reference.SWEEPS[:2]]
    commands.clear()
    assert reference.main(["--larger-backbone"]) == 0 and commands == [list(reference.LARGER_BACKBONE)]
