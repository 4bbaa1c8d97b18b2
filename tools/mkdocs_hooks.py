"""MkDocs hook (mkdocs.yml, ``hooks:``): links from a page to a file of the repository outside
``docs/`` (``../CONTRIBUTING.md``, ``../deploy/systemd/modelswap.service``).

Such a link works where the Markdown is read in the repository (GitHub, an editor), but the site
holds only ``docs/``, and MkDocs' strict build rejects any link it cannot follow. So on the site
the link becomes its text (with the path beside it when the text does not name it), after
checking that the target exists inside the repository: a link to a missing file, or to one
outside the repository, is a warning, which ``mkdocs build --strict`` turns into a failure.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.repo_links")

LINK = re.compile(r"\[(?P<label>[^\]]*)\]\((?P<target>\.\./[^)\s#]+)(?P<anchor>#[^)\s]*)?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def repo_link_text(label: str, target: str) -> str:
    """What the site shows for a link to a repository file: its text, naming the file."""
    path = target.lstrip("./")
    return label if path in label else f"{label} (`{path}`)"


def rewrite(markdown: str, page_dir: Path, docs_dir: Path, repo: Path, where: str) -> str:
    """``markdown`` with its links to repository files outside ``docs_dir`` made plain text."""

    def one(match: re.Match[str]) -> str:
        resolved = (page_dir / match["target"]).resolve()
        if resolved.is_relative_to(docs_dir):
            return match[0]  # a page of the site: MkDocs follows and checks it
        if not resolved.is_relative_to(repo):
            log.warning("%s links to %s, outside the repository", where, match["target"])
            return match["label"]
        if not resolved.exists():
            log.warning("%s links to %s, which does not exist", where, match["target"])
        return repo_link_text(match["label"], str(resolved.relative_to(repo)))

    out, fenced = [], False
    for line in markdown.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
        out.append(line if fenced else LINK.sub(one, line))
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    docs_dir = Path(config["docs_dir"]).resolve()
    repo = Path(config["config_file_path"]).resolve().parent
    source = docs_dir / page.file.src_path
    return rewrite(markdown, source.parent, docs_dir, repo, page.file.src_path)
