"""The prompt cache kept across a swap: top-level ``promptCache`` resolved (issue 30)."""

from __future__ import annotations

from modelswap.config.paths import Problems, key_path
from modelswap.config.resolved import PromptCacheSettings
from modelswap.config.scheduling import parse_size
from modelswap.config.schema_cache import RawPromptCache


def resolve_prompt_cache(raw: RawPromptCache, problems: Problems) -> PromptCacheSettings:
    try:
        budget = parse_size(raw.disk_budget)
    except ValueError as exc:
        problems.append((key_path("promptCache", "diskBudget"), str(exc)))
        budget = PromptCacheSettings().disk_budget
    return PromptCacheSettings(
        enabled=raw.enabled,
        disk_budget=budget,
        save_seconds=raw.save_timeout,
        restore_seconds=raw.restore_timeout,
    )
