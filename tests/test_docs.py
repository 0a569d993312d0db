"""The documentation stands on its own: every link in README.md, docs/ and examples/
resolves inside the repository.

A user who clones the repository has nothing beside it, so a link may point at a file
of the repository (and, for Markdown, at one of its headings) or at a public web page,
never outside the clone: no ``../`` that escapes it, no absolute filesystem path, no
``/work/...`` or ``../shared`` in the text, no link to a server that only runs locally.
Markdown is parsed with markdown-it (CommonMark), so URLs inside code blocks and code
spans, such as ``http://localhost:8000/`` in a shell example, are not links.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

ROOT = Path(__file__).resolve().parents[1]
# Folders of the work tree that a clone does not have.
NOT_IN_A_CLONE = {".git", ".venv", "var", "node_modules"}
LOCAL_HOSTS = {"localhost", "127.0.0.1", "0.0.0.0", "::1"}
OUTSIDE_IN_TEXT = re.compile(r"(?<![\w.])/work/|\.\./shared\b")
EXAMPLE_NAMED = re.compile(r"examples/scenarios/[\w.-]+\.json")
HTML_TARGET = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)

_md = MarkdownIt("commonmark").enable(["table", "strikethrough"])


def documents(root: Path = ROOT) -> list[Path]:
    """README.md and every Markdown file under docs/ and examples/."""
    found = [root / "README.md"]
    for folder in ("docs", "examples"):
        found += sorted((root / folder).rglob("*.md"))
    return [p for p in found if p.is_file()]


def _text(token: Token) -> str:
    return "".join(child.content for child in token.children or [] if child.content)


def slug(heading: str) -> str:
    """The anchor a Git host gives a heading: lower case, punctuation dropped (letters,
    digits, spaces, hyphens and underscores kept), spaces turned into hyphens."""
    kept = "".join(c for c in heading.strip().lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file; repeated headings get -1, -2, ..."""
    tokens = _md.parse(path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    out: set[str] = set()
    for i, token in enumerate(tokens):
        if token.type == "heading_open":
            base = slug(_text(tokens[i + 1]))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def targets(path: Path) -> Iterator[tuple[int, str]]:
    """(line, target) of every link and image of a Markdown file, HTML ones included."""
    for token in _md.parse(path.read_text(encoding="utf-8")):
        line = token.map[0] + 1 if token.map else 0
        if token.type == "html_block":
            for target in HTML_TARGET.findall(token.content):
                yield line, target
        for child in token.children or []:
            if child.type == "link_open":
                yield line, str(child.attrs.get("href", ""))
            elif child.type == "image":
                yield line, str(child.attrs.get("src", ""))
            elif child.type == "html_inline":
                for target in HTML_TARGET.findall(child.content):
                    yield line, target


def link_problems(path: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with the links of one Markdown file (empty: nothing)."""
    where = path.relative_to(root)
    problems: list[str] = []
    for line, target in targets(path):
        at = f"{where}:{line}: {target!r}"
        parts = urlsplit(target)
        if parts.scheme in ("http", "https"):
            if (parts.hostname or "") in LOCAL_HOSTS:
                problems.append(f"{at} points at a locally running server, not a page")
            continue
        if parts.scheme == "mailto":
            continue
        if parts.scheme or parts.netloc:
            problems.append(f"{at} is not a repository path or a web page")
            continue
        if parts.path.startswith("/"):
            problems.append(f"{at} is an absolute path: links are relative to the file")
            continue
        resolved = (path.parent / unquote(parts.path)).resolve() if parts.path else path
        try:
            inside = resolved.relative_to(root.resolve())
        except ValueError:
            problems.append(f"{at} leads outside the repository")
            continue
        if inside.parts and inside.parts[0] in NOT_IN_A_CLONE:
            problems.append(f"{at} leads into {inside.parts[0]}/, which a clone does not have")
            continue
        if not resolved.exists():
            problems.append(f"{at} does not exist")
            continue
        fragment = unquote(parts.fragment)
        if fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            problems.append(f"{at}: no heading with that anchor in {inside}")
    return problems


def text_problems(path: Path, root: Path = ROOT) -> list[str]:
    """Paths outside the repository named in the text, code included, and example
    scenarios named that do not exist."""
    where = path.relative_to(root)
    problems: list[str] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if OUTSIDE_IN_TEXT.search(line):
            problems.append(f"{where}:{number}: names a path outside the repository")
        for name in EXAMPLE_NAMED.findall(line):
            if not (root / name).is_file():
                problems.append(f"{where}:{number}: {name} does not exist")
    return problems


# ------------------------------------------------------------------ the repository's docs


def test_the_documents_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in documents()}
    assert {"README.md", "docs/scheduling.md", "docs/scenarios.md"} <= names
    assert "examples/scenarios/README.md" in names


@pytest.mark.parametrize("path", documents(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_resolves_inside_the_repository(path: Path) -> None:
    assert link_problems(path) == []


@pytest.mark.parametrize("path", documents(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_path_outside_the_repository_and_named_examples_exist(path: Path) -> None:
    assert text_problems(path) == []


def test_every_example_scenario_is_listed_in_its_readme() -> None:
    folder = ROOT / "examples" / "scenarios"
    listed = {
        (folder / unquote(urlsplit(t).path)).resolve()
        for _, t in targets(folder / "README.md")
        if t.endswith(".json")
    }
    files = {p.resolve() for p in folder.glob("*.json")}
    assert files, "no example scenarios"
    assert files == listed


# ------------------------------------------------------------------ the checker itself


def test_the_checker_finds_each_kind_of_bad_link(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other page\n\n## Why it waits\n")
    page = tmp_path / "README.md"
    page.write_text(
        "# Title\n\n"
        "[ok](docs/other.md#why-it-waits) [ok too](#title) [web](https://example.org/x)\n"
        "[gone](docs/missing.md)\n"
        "[escape](../shared/DESIGN.md)\n"
        "[absolute](/work/shared/DESIGN.md)\n"
        "[anchor](docs/other.md#no-such-heading)\n"
        "[server](http://localhost:8000/)\n"
        '<img src="docs/nope.png">\n\n'
        "```sh\ncurl http://localhost:8000/api/ # [not a link](../outside.md)\n```\n"
        "Inline code is no link either: `[x](../outside.md)`.\n"
    )
    problems = link_problems(page, tmp_path)
    assert len(problems) == 6, problems
    for expected in (
        "'docs/missing.md' does not exist",
        "'../shared/DESIGN.md' leads outside the repository",
        "'/work/shared/DESIGN.md' is an absolute path",
        "no heading with that anchor",
        "'http://localhost:8000/' points at a locally running server",
        "'docs/nope.png' does not exist",
    ):
        assert any(expected in p for p in problems), expected


def test_the_checker_finds_outside_paths_and_missing_examples_in_text(tmp_path: Path) -> None:
    (tmp_path / "examples" / "scenarios").mkdir(parents=True)
    (tmp_path / "examples" / "scenarios" / "real.json").write_text("{}")
    page = tmp_path / "README.md"
    page.write_text(
        "Run `examples/scenarios/real.json` and `examples/scenarios/ghost.json`.\n"
        "See `/work/shared/scenarios/x.json`.\n"
    )
    assert text_problems(page, tmp_path) == [
        "README.md:1: examples/scenarios/ghost.json does not exist",
        "README.md:2: names a path outside the repository",
    ]


def test_heading_anchors_follow_the_git_host_rule() -> None:
    assert slug("Usage (`GET /api/queues/{id}/usage/`)") == "usage-get-apiqueuesidusage"
    assert slug("Why is my job waiting?") == "why-is-my-job-waiting"
    assert slug("Counting: own, borrowed, idle, free") == "counting-own-borrowed-idle-free"
