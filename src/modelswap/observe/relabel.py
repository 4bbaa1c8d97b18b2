"""Backends' own ``/metrics``, relayed in the gateway's exposition (``metrics.scrapeBackends``).

Each backend's text is kept as the backend wrote it — its ``# HELP``/``# TYPE`` lines, its
metric names (llama.cpp's ``llamacpp:n_tokens_max`` stays that, ``:`` and all, so llama.cpp's
own dashboards and queries work) and its sample values — with one change: every sample gets a
``model`` label (replacing one the backend set). Families that several backends report are
merged, so each family has one ``HELP``/``TYPE`` pair and all its samples together, as the text
format requires. A line that is not the text format makes that backend's part empty: half a
scrape is worse than none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\\n]|\\.)*)"\s*(?:,|(?=}))')
_META = re.compile(r"#\s+(HELP|TYPE)\s+([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\s(.*))?$")
_TYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped", "info", "stateset"})


class NotExposition(ValueError):
    """A line that is not the Prometheus text format."""


@dataclass
class _Family:
    help: str | None = None
    type: str | None = None
    samples: list[str] = field(default_factory=list)


def relabel_backend_metrics(text: str, model: str, limit: int = 5000) -> str:
    """One backend's exposition with the ``model`` label added (at most ``limit`` samples)."""
    return merge_backend_metrics([(model, text)], limit)


def merge_backend_metrics(parts: Iterable[tuple[str, str]], limit: int = 5000) -> str:
    """``(model, exposition)`` pairs as one exposition: each family once, in the order first
    seen, with every backend's samples (at most ``limit`` per backend), each labelled."""
    merged: dict[str, _Family] = {}
    for model, text in parts:
        try:
            families = _parse(text, _escape(model), limit)
        except NotExposition:
            continue
        for name, family in families.items():
            into = merged.setdefault(name, _Family())
            into.help = into.help if into.help is not None else family.help
            into.type = into.type if into.type is not None else family.type
            into.samples += family.samples
    lines: list[str] = []
    for name, family in merged.items():
        if family.help is not None:
            lines.append(f"# HELP {name} {family.help}".rstrip())
        if family.type is not None:
            lines.append(f"# TYPE {name} {family.type}")
        lines += family.samples
    return "\n".join(lines) + ("\n" if lines else "")


def _parse(text: str, model: str, limit: int) -> dict[str, _Family]:
    families: dict[str, _Family] = {}
    current: str | None = None
    count = 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            meta = _META.match(line)
            if meta is None:
                continue  # a comment (or OpenMetrics' "# EOF")
            kind, name, rest = meta[1], meta[2], (meta[3] or "").strip()
            family = families.setdefault(name, _Family())
            if kind == "HELP":
                family.help = rest
            elif rest not in _TYPES:
                raise NotExposition(line)
            else:
                family.type = rest
            current = name
            continue
        if count >= limit:
            break  # bounded work: the rest is dropped unread
        name, sample = _relabelled(line, model)
        ours = current is not None and (name == current or name.startswith(current + "_"))
        key = current if ours and current is not None else name
        families.setdefault(key, _Family()).samples.append(sample)
        count += 1
    return families


def _relabelled(line: str, model: str) -> tuple[str, str]:
    """``(metric name, the sample line with model="…")``; NotExposition if it is none."""
    match = _NAME.match(line)
    if match is None:
        raise NotExposition(line)
    name, rest = match[0], line[match.end() :]
    labels: list[str] = []
    if rest.startswith("{"):
        at = 1
        while not rest.startswith("}", at):
            label = _LABEL.match(rest, at)
            if label is None:
                raise NotExposition(line)
            if label[1] != "model":
                labels.append(f'{label[1]}="{label[2]}"')
            at = label.end()
            while rest.startswith(" ", at):
                at += 1
        rest = rest[at + 1 :]
    fields = rest.split()
    if not 1 <= len(fields) <= 2 or (rest and not rest[0].isspace()):
        raise NotExposition(line)
    try:
        float(fields[0])
        if len(fields) == 2:
            int(fields[1])
    except ValueError as exc:
        raise NotExposition(line) from exc
    labels.append(f'model="{model}"')
    return name, f"{name}{{{','.join(labels)}}} {' '.join(fields)}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
