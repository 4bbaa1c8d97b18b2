"""The documentation site (mkdocs.yml, docs/; issue 31): its strict build passes — a broken
link, a missing page or anchor, a page left out of the nav fails it — and the front page stays a
front page whose links lead somewhere. The build runs MkDocs as ``make docs`` does, into a
temporary folder; it needs no network."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tools.mkdocs_hooks import rewrite

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
README = REPO / "README.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    assert (tmp_path / "configuration" / "index.html").is_file()
    assert (tmp_path / "performance-history" / "index.html").is_file()


def test_the_readme_is_a_front_page_whose_links_resolve() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    assert "make run" in text
    assert "make test" in text
    targets = [t for t in LINK.findall(text) if not t.startswith(("http://", "https://", "#"))]
    assert any(t.startswith("docs/") for t in targets)
    for target in targets:
        path = (REPO / target.split("#", 1)[0]).resolve()
        assert path.is_relative_to(REPO), f"README.md links outside the repository: {target}"
        assert path.exists(), f"README.md links to {target}, which does not exist"


def test_no_page_cites_a_document_outside_the_repository() -> None:
    for page in [README, *DOCS.rglob("*.md")]:
        assert "../shared" not in page.read_text(), page


def test_links_to_repository_files_become_text_and_missing_ones_warn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def site(markdown: str) -> str:
        return rewrite(markdown, DOCS, DOCS, REPO, "page.md")

    with caplog.at_level(logging.WARNING, logger="mkdocs.hooks.repo_links"):
        assert site("see [`CONTRIBUTING.md`](../CONTRIBUTING.md).") == "see `CONTRIBUTING.md`."
        assert site("[the unit](../deploy/systemd/modelswap.service)") == (
            "the unit (`deploy/systemd/modelswap.service`)"
        )
        assert site("[a page](backends.md)") == "[a page](backends.md)"  # MkDocs checks it
        assert site("```\n[x](../CONTRIBUTING.md)\n```") == "```\n[x](../CONTRIBUTING.md)\n```"
        assert caplog.records == []
        site("[gone](../NOT-THERE.md) and [away](../../elsewhere.md)")
    assert [r.getMessage() for r in caplog.records] == [
        "page.md links to ../NOT-THERE.md, which does not exist",
        "page.md links to ../../elsewhere.md, outside the repository",
    ]


@pytest.mark.parametrize(
    ("markdown", "complaint"),
    [
        ("[a page](missing.md)", "missing.md"),
        ("[an anchor](other.md#no-such-heading)", "no-such-heading"),
        ("[a file](../no-such-file.txt)", "no-such-file.txt"),
    ],
    ids=["missing page", "missing anchor", "missing repository file"],
)
def test_the_strict_build_fails_on_a_broken_link(
    tmp_path: Path, markdown: str, complaint: str
) -> None:
    """mkdocs.yml's own validation settings and hook, on a two-page site with one bad link."""
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    docs = tmp_path / "site-src" / "docs"
    docs.mkdir(parents=True)
    (docs / "index.md").write_text(f"# Home\n\n{markdown}\n")
    (docs / "other.md").write_text("# Other\n\n## A heading\n")
    config.update(
        docs_dir=str(docs),
        site_dir=str(tmp_path / "site"),
        nav=["index.md", "other.md"],
        hooks=[str(REPO / "tools" / "mkdocs_hooks.py")],
    )
    (docs.parent / "mkdocs.yml").write_text(yaml.safe_dump(config))
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict"],
        cwd=docs.parent,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert build.returncode != 0
    assert complaint in build.stderr
