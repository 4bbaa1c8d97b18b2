"""The shipped documentation as tools (llama-swap's names: ``docs__list_docs``,
``docs__get_doc``, ``docs__search_docs``).

The pages are the docs site's own (``docs/*.md``), shipped inside the package as
``modelswap/docs`` (a link to ``docs/`` in the source tree, copied into the wheel as package
data), so an installed gateway reads the pages of its own version.
"""

from __future__ import annotations

import asyncio
import functools
import re
from dataclasses import dataclass
from importlib import resources

from modelswap.http.mcp.registry import Args, Caller, Tool, ToolError

DEFAULT_LINES, MAX_LINES = 250, 400
DEFAULT_HITS, MAX_HITS = 5, 15
MAX_TERMS = 12  # a query's words past these are ignored: a search costs bounded work
SNIPPET_LINES = 2  # each side of a matching line


@dataclass(frozen=True, slots=True)
class Doc:
    id: str
    title: str
    summary: str
    lines: tuple[str, ...]
    lowered: tuple[str, ...]  # the lines lowercased once, for the search


def _summary(lines: list[str]) -> str:
    """The first paragraph of prose after the title, in one line of at most 200 characters."""
    words: list[str] = []
    for line in lines[1:]:
        text = line.strip()
        if not text:
            if words:
                break
            continue
        if text.startswith(("#", "```", "|", "<")):
            if words:
                break
            continue
        words.append(text)
    summary = " ".join(words)
    return summary if len(summary) <= 200 else summary[:199].rstrip() + "…"


@functools.cache
def shipped() -> dict[str, Doc]:
    """Every shipped page by id (its file name without ``.md``), read once."""
    docs: dict[str, Doc] = {}
    root = resources.files("modelswap") / "docs"
    if not root.is_dir():
        return docs
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".md") or not entry.is_file():
            continue
        lines = entry.read_bytes().decode("utf-8", errors="replace").splitlines()
        doc_id = entry.name[:-3]
        title = next((ln.lstrip("#").strip() for ln in lines if ln.startswith("# ")), doc_id)
        lowered = tuple(line.lower() for line in lines)
        docs[doc_id] = Doc(doc_id, title, _summary(lines), tuple(lines), lowered)
    return docs


def _docs() -> dict[str, Doc]:
    docs = shipped()
    if not docs:
        raise ToolError("This installation carries no documentation (modelswap/docs is empty).")
    return docs


async def list_docs(caller: Caller, args: Args) -> str:
    out = ["modelswap's documentation. Read a page with docs__get_doc and its id.", ""]
    out += [f"- {d.id} — {d.title}: {d.summary}" for d in _docs().values()]
    return "\n".join(out)


def _unknown(doc_id: str, docs: dict[str, Doc]) -> ToolError:
    needle = doc_id.lower()
    near = [i for i in docs if needle in i.lower() or i.lower() in needle] or list(docs)
    return ToolError(
        f"No page with id {doc_id[:64]!r}. The ids: {', '.join(near[:25])}. "
        "docs__list_docs lists them with their titles."
    )


async def get_doc(caller: Caller, args: Args) -> str:
    docs = _docs()
    doc_id = args.required("id", "docs__list_docs gives the ids.")
    doc_id = doc_id.removesuffix(".md")
    doc = docs.get(doc_id)
    if doc is None:
        raise _unknown(doc_id, docs)
    total = len(doc.lines)
    offset = args.integer("offset", 0, 0, total)
    count = args.integer("max_lines", DEFAULT_LINES, 1, MAX_LINES)
    end = min(total, offset + count)
    text = f"# {doc.title} ({doc.id}), lines {offset + 1}-{end} of {total}\n\n"
    text += "\n".join(doc.lines[offset:end]) + "\n"
    if end < total:
        text += f"\n[more: call docs__get_doc again with offset={end}]\n"
    return text


def _terms(query: str) -> list[str]:
    words = re.findall(r"[\w.-]+", query.lower())
    return list(dict.fromkeys(w for w in words if len(w) > 1))[:MAX_TERMS]


def _hits(docs: dict[str, Doc], terms: list[str]) -> list[tuple[int, str, int]]:
    """(score, page id, line index) of every line holding a term: more terms score higher,
    a heading and a page whose title holds them a little higher."""
    hits: list[tuple[int, str, int]] = []
    for doc in docs.values():
        title_terms = sum(t in doc.title.lower() for t in terms)
        for index, low in enumerate(doc.lowered):
            found = sum(t in low for t in terms)
            if found:
                score = found * 10 + title_terms * 3 + (5 if low.startswith("#") else 0)
                hits.append((score, doc.id, index))
    return hits


async def search_docs(caller: Caller, args: Args) -> str:
    docs = _docs()
    query = args.required("query", "Give a few keywords, e.g. 'ttl unload'.")
    terms = _terms(query)
    if not terms:
        raise ToolError("The query has no words to look for.")
    limit = args.integer("max_results", DEFAULT_HITS, 1, MAX_HITS)
    hits = await asyncio.to_thread(_hits, docs, terms)  # ~10 ms of scanning: off the loop
    if not hits:
        return f"No matches for {query[:80]!r}. Try fewer or broader words, or docs__list_docs."
    hits.sort(key=lambda h: (-h[0], h[1], h[2]))
    chosen: list[tuple[str, int]] = []
    for _, doc_id, index in hits:  # one snippet per neighbourhood of lines
        if any(d == doc_id and abs(i - index) <= 2 * SNIPPET_LINES for d, i in chosen):
            continue
        chosen.append((doc_id, index))
        if len(chosen) == limit:
            break
    out = [f"{len(chosen)} matches for {query[:80]!r}. Read a page with docs__get_doc."]
    for n, (doc_id, index) in enumerate(chosen, 1):
        doc = docs[doc_id]
        lo, hi = max(0, index - SNIPPET_LINES), min(len(doc.lines), index + SNIPPET_LINES + 1)
        snippet = "\n".join(doc.lines[lo:hi])
        out.append(f"\n{n}. {doc_id} (line {index + 1}, offset={lo}) — {doc.title}\n{snippet}")
    return "\n".join(out)


TOOLS = (
    Tool(
        "docs__list_docs",
        "List modelswap's documentation",
        "List modelswap's documentation pages: each page's id, title and summary. Then read "
        "one with docs__get_doc.",
        list_docs,
    ),
    Tool(
        "docs__get_doc",
        "Read a modelswap documentation page",
        "Read one documentation page by id (from docs__list_docs or docs__search_docs), a "
        "window of lines at a time.",
        get_doc,
        properties={
            "id": {"type": "string", "description": "The page id, e.g. 'scheduling'."},
            "offset": {"type": "integer", "minimum": 0, "description": "First line (0-based)."},
            "max_lines": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_LINES,
                "description": f"Lines to read; default {DEFAULT_LINES}.",
            },
        },
        required=("id",),
        hint="Read a smaller window: a lower max_lines, then the next offset.",
    ),
    Tool(
        "docs__search_docs",
        "Search modelswap's documentation",
        "Keyword search across every documentation page: matching lines with the page id and "
        "the offset to read from with docs__get_doc. Start here for any question about "
        "modelswap.",
        search_docs,
        properties={
            "query": {"type": "string", "description": "Keywords, e.g. 'ttl unload'."},
            "max_results": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_HITS,
                "description": f"Most matches to return; default {DEFAULT_HITS}.",
            },
        },
        required=("query",),
        hint="Ask for fewer results (max_results).",
    ),
)
