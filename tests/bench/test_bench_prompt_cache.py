"""Scenario 11's figures and goals (bench/prompt_cache.py), from one round's results as the
scenario records them: the table renders, the ratios are the issue's. The scenario itself runs
real llama.cpp for a minute or more: ``bench/suite.py --quick --scenarios promptcache``."""

from __future__ import annotations

from typing import Any

from bench import prompt_cache


def turn(ttft: float, cache_n: int, prompt_n: int, text: str = "Note 3.") -> dict[str, Any]:
    return {
        "ttft": ttft,
        "text": text,
        "timings": {"cache_n": cache_n, "prompt_n": prompt_n},
        "usage": {"prompt_tokens": cache_n + prompt_n},
    }


def swap(total: float, stop: float, cache: dict[str, Any] | None = None) -> dict[str, Any]:
    receipt: dict[str, Any] = {"total_seconds": total, "stop_seconds": stop}
    if cache is not None:
        receipt["prompt_cache"] = cache
    return receipt


RESULT = {
    "sentences": 52,
    "rounds": [
        {
            "mode": "kept",
            "turn1": turn(5.0, 0, 1490),
            "away": swap(0.65, 0.16, {"saved": [{"ms": 109.0, "bytes": 34_700_052}]}),
            "back": swap(0.63, 0.05, {"restored": {"ms": 36.0}}),
            "turn2": turn(0.21, 1505, 24),
        },
        {
            "mode": "lost",
            "turn1": turn(5.0, 0, 1490),
            "away": swap(0.50, 0.05),
            "back": swap(0.58, 0.05),
            "turn2": turn(5.9, 0, 1529),
        },
        {"mode": "floor", "turn1": turn(5.0, 0, 1490), "turn2": turn(0.20, 1505, 24)},
    ],
}


def test_the_goals_are_the_issues_ratios() -> None:
    goals = {
        goal.split(":")[1].strip()[:20]: (value, met)
        for goal, value, met in prompt_cache.goals(RESULT)
    }
    assert goals["next turn's TTFT ≥ 5"] == ("28.1×", True)
    assert goals["within 1.5× of the n"] == ("1.05×", True)
    assert goals["the swap away ≤ 10 %"] == ("+30.0 %", False)


def test_the_table_renders_each_mode() -> None:
    text = "\n".join(prompt_cache.render(RESULT))
    assert "| swapped out and back, prompt cache kept | **0.210** | 1529 / 1505 / 24 " in text
    assert "0.109 (34.7 MB) | 0.036 |" in text
    assert "word for word, in every round: yes" in text
