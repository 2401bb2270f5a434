"""Every relative link in README.md and docs/*.md names a file that exists and, with a
`#fragment`, a heading that file has (the anchor GitHub makes from it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings: lower case, punctuation but `-` and `_`
    dropped, spaces as `-`, a repeated one suffixed `-1`, `-2`, ..."""
    seen: dict[str, int] = {}
    found = set()
    for heading in _HEADING.findall(_FENCE.sub("", markdown)):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken_links(path: Path) -> list[str]:
    """Each relative link of the markdown file at `path` that resolves to nothing."""
    text = path.read_text()
    prose = _CODE_SPAN.sub("", _FENCE.sub("", text))
    broken = []
    for target in _LINK.findall(prose):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, fragment = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked.read_text()):
            broken.append(f"{target}: no such heading")
    return broken


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    assert broken_links(path) == []


def test_docs_are_found() -> None:
    assert ROOT / "README.md" in DOCS and len(DOCS) > 1


def test_a_missing_file_or_heading_is_reported(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# The `proxy` (limits)\n\n## Notes\n\n## Notes\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Top\n[ok](other.md#the-proxy-limits) [twice](other.md#notes-1) [here](#top)\n"
        "[web](https://example.com/x.md) `[code](gone.md)`\n"
        "[gone](gone.md) [bad anchor](other.md#nope) [bad here](#nowhere)\n"
        "```\n[in a fence](gone-too.md)\n```\n"
    )
    assert broken_links(page) == [
        "gone.md: no such file",
        "other.md#nope: no such heading",
        "#nowhere: no such heading",
    ]
