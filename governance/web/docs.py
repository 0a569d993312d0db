"""The product's guides in the browser: ``docs/*.md`` rendered at ``/docs/<name>/``, so
the pages that name a guide (the Admin page, the sign-in page of an empty installation)
link to it instead of naming a file on the server.

Open to everyone, signed in or not: the sign-in page of an empty installation points at
the admin guide before anyone can sign in, and the guides hold nothing a visitor could
not read in the repository. Raw HTML in the Markdown is escaped (markdown-it's
``html`` option off); links between guides stay inside ``/docs/``.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

DOCS_DIR = Path(settings.BASE_DIR) / "docs"
NAME = re.compile(r"[a-z][a-z0-9-]{0,40}")
# A link from one guide to another ("data-model.md#shares") stays in the browser.
_DOC_LINK = re.compile(r'href="([a-z][a-z0-9-]{0,40})\.md(#[^"]*)?"')


@cache
def _render(path: Path, mtime: float) -> tuple[str, SafeString]:
    text = path.read_text(encoding="utf-8")
    html = MarkdownIt("commonmark", {"html": False}).enable("table").render(text)
    html = _DOC_LINK.sub(lambda m: f'href="/docs/{m.group(1)}/{m.group(2) or ""}"', html)
    title = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), "")
    return title or path.stem, mark_safe(html)


def doc_page(request: HttpRequest, name: str) -> HttpResponse:
    path = DOCS_DIR / f"{name}.md"
    if not NAME.fullmatch(name) or not path.is_file():
        raise Http404("No such guide.")
    title, html = _render(path, path.stat().st_mtime)
    return render(request, "docs/page.html", {"title": title, "html": html, "name": name})
