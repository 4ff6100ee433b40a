"""The LLM front door every method uses: cache, usage per stage, tolerant JSON.

Methods never talk to a backend directly. They call
:meth:`LLMClient.generate` or :meth:`LLMClient.generate_json` with a *stage*
name (``note``, ``evolve``, ``route``, ``profile``, ``pick``, ``keywords``,
``answer``, ...), so that every call is cached, counted and, for JSON,
validated the same way for CLAG and every baseline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from clag.llm.base import Completion, GenerationConfig, LLMBackend
from clag.llm.cache import CallCache, CallNotCached
from clag.llm.json_parse import parse_json_object

log = logging.getLogger(__name__)

CLAIM_POLL_S = 0.5
"""How often a call another process is generating is looked for in the cache (calls take seconds to minutes)."""

USAGE_FIELDS = (
    "calls",
    "cache_hits",
    "prompt_tokens",
    "completion_tokens",
    "json_calls",
    "parse_failures",
    "retries",
    "fallbacks",
    "truncated",
    "placeholder_echoes",
)
"""Per stage: calls, answered from the cache, tokens, JSON calls and their parse failures, retries and
fallbacks, completions that stopped at their token budget (``truncated``: the reply was cut off), and JSON
replies whose required fields echo the prompt's placeholders (``placeholder_echoes``, accepted or not)."""


class UsageMeter:
    """Per-stage counters; thread-safe so concurrent episodes can share one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(USAGE_FIELDS, 0))

    def add(self, stage: str, **counts: int) -> None:
        with self._lock:
            row = self._counts[stage]
            for name, value in counts.items():
                row[name] += value

    def snapshot(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {stage: dict(row) for stage, row in self._counts.items()}

    @staticmethod
    def diff(after: Mapping[str, Mapping[str, int]], before: Mapping[str, Mapping[str, int]]) -> dict:
        """Counts accrued between two snapshots, dropping stages with no calls."""
        out: dict[str, dict[str, int]] = {}
        for stage, row in after.items():
            prev = before.get(stage, {})
            delta = {name: value - prev.get(name, 0) for name, value in row.items()}
            if any(delta.values()):
                out[stage] = delta
        return out


class LLMClient:
    """Cache + usage accounting + JSON handling in front of one backend.

    Args:
        backend: Any :class:`~clag.llm.base.LLMBackend`.
        cache: Persistent call cache; ``None`` disables caching.
        defaults: Generation settings for every stage.
        stage_settings: Per-stage overrides of ``defaults`` (e.g. the
            authors' temperature 0.7 for memory operations).
        constrained_json: Pass the JSON schema to the backend for constrained
            decoding where it supports it (the authors' SGLang setting).
        json_retry_temperature: A failed JSON call is retried once, sampled at
            this temperature with a fixed seed (a greedy retry would repeat itself).
        cache_only: Never call the backend: a call the cache lacks raises
            :class:`~clag.llm.cache.CallNotCached` (replays of recorded runs).
        reject_truncated_json: A JSON reply that stopped at its token budget is a failure (retried,
            then the caller's fallback), never accepted after repair; off keeps the repaired object, as
            the committed reference ran. Truncated replies are counted either way (``truncated``).
        json_retry: Retry a failed JSON call once (ours); off = the caller's fallback at once, counted
            (the authors' code never retries).
        accept_placeholders: Keep a reply whose required fields echo the prompt's placeholders or are
            empty (the authors' code keeps whatever parses); off refuses it. Counted either way.
        free_retry_stages: Stages whose failed JSON reply is retried without the schema. Forced into
            JSON by the grammar, a model not asked for JSON in words can open the object and then emit
            the whitespace the grammar allows until its budget runs out (the 0.5B model under the raw
            answer prompt: ``{`` and 95 tokens of nothing on 25 of BioASQ RAG's 60 questions); its free
            reply is parsed where it can be, else its first line is the text the caller's fallback keeps
            (free, the model runs on past its answer: "South Korea\n\nExplanation: ...").
    """

    def __init__(
        self,
        backend: LLMBackend,
        cache: CallCache | None = None,
        defaults: GenerationConfig | None = None,
        stage_settings: Mapping[str, Mapping[str, Any]] | None = None,
        constrained_json: bool = True,
        json_retry_temperature: float = 0.7,
        retry_seed: int = 1234,
        cache_only: bool = False,
        reject_truncated_json: bool = False,
        json_retry: bool = True,
        accept_placeholders: bool = False,
        free_retry_stages: Collection[str] = (),
    ) -> None:
        self.backend = backend
        self.cache = cache
        self.defaults = defaults or GenerationConfig()
        self.stage_settings = {stage: dict(values) for stage, values in (stage_settings or {}).items()}
        self.constrained_json = constrained_json
        self.json_retry_temperature = json_retry_temperature
        self.retry_seed = retry_seed
        self.cache_only = cache_only
        self.reject_truncated_json = reject_truncated_json
        self.json_retry = json_retry
        self.accept_placeholders = accept_placeholders
        self.free_retry_stages = frozenset(free_retry_stages)
        self.usage = UsageMeter()
        self._identity = backend.identity()

    def identity(self) -> dict[str, Any]:
        return dict(self._identity)

    def config_for(self, stage: str, **overrides: Any) -> GenerationConfig:
        """Defaults, then the stage's settings, then call-site overrides."""
        return replace(self.defaults, **{**self.stage_settings.get(stage, {}), **overrides})

    def generate(self, prompts: Sequence[str], stage: str, **overrides: Any) -> list[str]:
        """Generate one completion per prompt (batched, cache first)."""
        config = self.config_for(stage, **overrides)
        return [c.text for c in self._complete(list(prompts), config, stage)]

    def generate_json(
        self, prompts: Sequence[str], stage: str, schema: Mapping[str, Any], **overrides: Any
    ) -> list[dict[str, Any] | None]:
        """Generate and parse one JSON object per prompt.

        Each answer is repaired if broken and validated against ``schema``
        (required keys present, no echoed placeholders). Failures are retried
        once, sampled; what still fails comes back as ``None`` for the caller's
        documented fallback. Nothing raises.
        """
        return [value for value, _ in self.generate_json_with_text(prompts, stage, schema, **overrides)]

    def generate_json_with_text(
        self, prompts: Sequence[str], stage: str, schema: Mapping[str, Any], **overrides: Any
    ) -> list[tuple[dict[str, Any] | None, str]]:
        """As :meth:`generate_json`, also returning the last raw text per prompt
        (for callers whose fallback is the raw answer, like the authors' answerer)."""
        schema = dict(schema)
        json_schema = schema if self.constrained_json else None
        config = self.config_for(stage, json_schema=json_schema, **overrides)
        completions = self._complete(list(prompts), config, stage)
        texts = [c.text for c in completions]
        results = [self._parse(c, config, schema, stage) for c in completions]
        failed = [i for i, value in enumerate(results) if value is None]
        self.usage.add(stage, json_calls=len(prompts), parse_failures=len(failed))
        if failed and not self.json_retry:
            self.usage.add(stage, fallbacks=len(failed))
        elif failed:
            free = stage in self.free_retry_stages
            retry = replace(
                config,
                temperature=self.json_retry_temperature,
                seed=self.retry_seed,
                json_schema=None if free else config.json_schema,
            )
            retried = self._complete([prompts[i] for i in failed], retry, stage)
            self.usage.add(stage, retries=len(failed))
            for i, completion in zip(failed, retried):
                results[i] = self._parse(completion, retry, schema, stage)
                texts[i] = first_line(completion.text) if free and results[i] is None else completion.text
                if results[i] is None:
                    log.debug("stage %s: unusable JSON after retry: %r", stage, completion.text[:200])
            self.usage.add(stage, fallbacks=sum(results[i] is None for i in failed))
        return list(zip(results, texts))

    def _parse(
        self, completion: Completion, config: GenerationConfig, schema: Mapping[str, Any], stage: str
    ) -> dict | None:
        """The reply's JSON object, or None; a cut-off reply is None when truncated JSON is rejected.

        A reply that is valid but for echoed placeholders is counted in ``placeholder_echoes`` and
        then refused, or accepted with ``accept_placeholders`` (the authors' code).
        """
        if self.reject_truncated_json and truncated(completion, config):
            return None
        value = parse_json_object(completion.text, schema)
        if value is None and (echo := parse_json_object(completion.text, schema, accept_placeholders=True)):
            self.usage.add(stage, placeholder_echoes=1)
            return echo if self.accept_placeholders else None
        return value

    def _keep_answered(self, err: Exception, generated: list[int], keys: list[str | None]) -> None:
        """Cache what a batch answered before it failed (``completed`` of the error, by position in
        the batch: see :class:`clag.llm.base.LLMBackend`), so a resumed run never asks it again."""
        completed = getattr(err, "completed", None)
        if self.cache is not None and completed:
            self.cache.put_many((keys[generated[j]], c) for j, c in completed.items() if keys[generated[j]] is not None)

    def _generate(
        self,
        prompts: list[str],
        indices: list[int],
        keys: list[str | None],
        config: GenerationConfig,
        results: list[Completion | None],
    ) -> None:
        """One backend call for ``prompts[indices]`` into ``results``; the answers are stored and their
        claims released (on failure too: what the batch answered is kept, the rest is free to ask again)."""
        kept = [i for i in indices if keys[i] is not None]
        try:
            try:
                fresh = self.backend.generate([prompts[i] for i in indices], config)
            except Exception as err:
                self._keep_answered(err, indices, keys)
                raise
            if len(fresh) != len(indices):
                raise RuntimeError(f"backend returned {len(fresh)} completions for {len(indices)} prompts")
            answers = dict(zip(indices, fresh))
            for i, completion in answers.items():
                results[i] = completion
            if self.cache is not None and kept:
                # another run may have stored the same call meanwhile: its answer is the answer
                stored = self.cache.put_many((str(keys[i]), answers[i]) for i in kept)
                for i, completion in zip(kept, stored):
                    results[i] = completion
        finally:
            if self.cache is not None and kept:
                self.cache.release(str(keys[i]) for i in kept)

    def _generate_claimed(
        self,
        cache: CallCache,
        prompts: list[str],
        indices: list[int],
        keys: list[str | None],
        config: GenerationConfig,
        results: list[Completion | None],
    ) -> None:
        """Generate the calls this process can claim and wait for the others' answers to reach the cache,
        taking over any claim its holder gives up (released unanswered, died, or expired)."""
        pending = indices
        while pending:
            held = cache.claim(key for i in pending if (key := keys[i]) is not None)
            mine = [i for i in pending if keys[i] is None or keys[i] in held]
            if mine:
                self._generate(prompts, mine, keys, config, results)
            pending = [i for i in pending if results[i] is None]
            if pending:
                time.sleep(CLAIM_POLL_S)
                for i in pending:
                    results[i] = cache.get(str(keys[i]))
                pending = [i for i in pending if results[i] is None]

    def _complete(self, prompts: list[str], config: GenerationConfig, stage: str) -> list[Completion]:
        """Completions in order: cache hits first, then one backend call for the misses.

        A prompt repeated within a cacheable call is generated once, and one
        another process is generating (its claim, :meth:`CallCache.claim`) is
        awaited rather than generated again; a fresh completion gives way to
        one another run stored first for the same key (see :mod:`clag.llm.cache`).
        Token counts include cache hits, so usage describes the method's
        workload whether or not a rerun was answered from the cache; an awaited
        call counts as a miss, as the call this run would otherwise have made.
        """
        results: list[Completion | None] = [None] * len(prompts)
        keys: list[str | None] = [None] * len(prompts)
        if self.cache is not None and self.cache.cacheable(config):
            for i, prompt in enumerate(prompts):
                keys[i] = self.cache.key(self._identity, prompt, config)
                results[i] = self.cache.get(keys[i])
        missing = [i for i, result in enumerate(results) if result is None]
        first_of: dict[str, int] = {}  # cache key -> index of its first occurrence among the misses
        to_generate = []
        for i in missing:
            if keys[i] is None or keys[i] not in first_of:
                to_generate.append(i)
                if keys[i] is not None:
                    first_of[keys[i]] = i
        if to_generate and self.cache_only:
            where = self.cache.path if self.cache is not None else "(the cache is disabled)"
            raise CallNotCached(
                f"stage {stage!r}: {len(to_generate)} call(s) not in the LLM cache {where} and cache.only=true; "
                f"the first prompt begins {prompts[to_generate[0]][:120]!r}"
            )
        if to_generate and self.cache is not None:
            self._generate_claimed(self.cache, prompts, to_generate, keys, config, results)
        elif to_generate:
            self._generate(prompts, to_generate, keys, config, results)
        for i in missing:
            if results[i] is None:
                results[i] = results[first_of[keys[i]]]
        done = [r for r in results if r is not None]
        self.usage.add(
            stage,
            calls=len(prompts),
            cache_hits=len(prompts) - len(missing),
            prompt_tokens=sum(c.prompt_tokens for c in done),
            completion_tokens=sum(c.completion_tokens for c in done),
            truncated=sum(truncated(c, config) for c in done),
        )
        return done


def first_line(text: str) -> str:
    """The first non-blank line of ``text`` (empty when there is none)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def truncated(completion: Completion, config: GenerationConfig) -> bool:
    """Whether a completion stopped at its token budget (its reply was cut off, not finished)."""
    return completion.completion_tokens >= config.max_new_tokens
