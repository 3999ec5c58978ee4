"""The bundle's PEP 503 `simple/` tree: a page per distribution linking its files (wheels/,
bootstrap/, sources/) with their sha256, so a served bundle is also an index that pip and uv on
any node can use (`--index-url http://head:8000/<bundle>/simple/`). The pages are plain files,
so `python3 -m http.server` or nginx serving the extracted bundle is the whole index server."""

from __future__ import annotations

import html
from collections.abc import Iterable
from urllib.parse import quote

from verl_bundle.airgap.contract import manifest as mf

SIMPLE = "simple"
_PAGE = (
    "<!DOCTYPE html>\n<html>\n  <head>\n"
    '    <meta name="pypi:repository-version" content="1.0">\n'
    "    <title>{title}</title>\n  </head>\n  <body>\n{links}  </body>\n</html>\n"
)


def _page(title: str, links: list[tuple[str, str]]) -> bytes:
    body = "".join(
        f'    <a href="{html.escape(href)}">{html.escape(text)}</a><br>\n' for href, text in links
    )
    return _PAGE.format(title=html.escape(title), links=body).encode()


def pages(files: Iterable[mf.File]) -> list[tuple[str, bytes]]:
    """(bundle path, content) of simple/index.html and simple/<name>/index.html for the
    bundle's payload files; links are relative (`../../wheels/<file>#sha256=...`), so the tree
    works wherever the bundle is served from."""
    by_name: dict[str, list[mf.File]] = {}
    for f in files:
        by_name.setdefault(mf.canonical(f.name), []).append(f)
    out = [
        (
            f"{SIMPLE}/index.html",
            _page("Simple index", [(f"{name}/", name) for name in sorted(by_name)]),
        )
    ]
    for name in sorted(by_name):
        links = [
            (f"../../{quote(f.path)}#sha256={f.sha256}", f.filename)
            for f in sorted(by_name[name], key=lambda f: f.filename)
        ]
        out.append((f"{SIMPLE}/{name}/index.html", _page(f"Links for {name}", links)))
    return out
