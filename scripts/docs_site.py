"""The documentation site's MkDocs hooks (``mkdocs.yml``: ``hooks``): one source for every page.

- The repository's own Markdown outside ``docs/`` is published as it is, under the same path: ``README.md`` is the
  home page, ``benchmarks/README.md`` the benchmarks page (with the images it shows), and any other file
  :data:`PUBLISHED` names that exists (``benchmarks/leaderboard.md``).
- Every link of every page is read as a path in the repository, as GitHub reads it: a link to a published page
  becomes a link to it on the site, a link to another file of the repository (``plugins/ncr.py``) becomes that
  path as code, and a link to a file the repository does not have is a warning, so ``mkdocs build --strict``
  fails on it.
- The API reference's reStructuredText roles (``:func:``) are dropped before their code spans.
- The nav entry ``methods/`` expands to ``docs/methods/README.md`` followed by every other method page, so a page
  added there is in the navigation without an edit here. A nav entry of a :data:`PUBLISHED` file the repository
  does not have yet (``benchmarks/leaderboard.md``, written by ``benchmarks/leaderboard.py``) is left out; a link
  to it still fails the build.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[1]
DOCS = "docs"
PUBLISHED = ("README.md", "benchmarks/README.md", "benchmarks/leaderboard.md")
"""Repository files outside ``docs/`` published under their own path (README.md as the home page)."""
IMAGES = ("benchmarks",)
"""Folders outside ``docs/`` whose images the published files show."""
SITE_PATH = {"README.md": "index.md"}

LINK = re.compile(r"(!?)\[([^\]\n]*)\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")
log = logging.getLogger("mkdocs.plugins.hfncl_docs")


def published() -> list[str]:
    """The files of :data:`PUBLISHED` the repository has."""
    return [name for name in PUBLISHED if (REPO / name).is_file()]


def site_path(repo_path: str) -> str | None:
    """Where a repository file is on the site, or ``None`` when the site does not publish it."""
    if repo_path.startswith(DOCS + "/"):
        return repo_path[len(DOCS) + 1 :]
    if repo_path in published():
        return SITE_PATH.get(repo_path, repo_path)
    if repo_path.split("/")[0] in IMAGES and repo_path.endswith(".png"):
        return repo_path
    return None


def repo_path_of(site_uri: str) -> str:
    """The repository file a site page comes from."""
    for name in published():
        if SITE_PATH.get(name, name) == site_uri:
            return name
    return f"{DOCS}/{site_uri}"


def on_config(config: Any) -> Any:
    """Expand the nav entry ``methods/`` into the method pages: the index first, then the others by name."""
    methods = REPO / DOCS / "methods"
    pages = ["methods/README.md", *(f"methods/{p.name}" for p in sorted(methods.glob("*.md")) if p.name != "README.md")]

    absent = {SITE_PATH.get(name, name) for name in PUBLISHED} - {SITE_PATH.get(name, name) for name in published()}

    def expand(items: list[Any]) -> list[Any]:
        return [
            {key: pages if value == "methods/" else expand(value) if isinstance(value, list) else value}
            if isinstance(item, dict)
            else item
            for item in items
            for key, value in (item.items() if isinstance(item, dict) else [(None, None)])
            if value not in absent
        ]

    config["nav"] = expand(config["nav"])
    return config


def on_files(files: Files, config: Any) -> Files:
    """Add the published files outside ``docs/`` and the images they show."""
    for name in published():
        files.append(File.generated(config, SITE_PATH.get(name, name), abs_src_path=str(REPO / name)))
    for folder in IMAGES:
        for image in sorted((REPO / folder).glob("*.png")):
            files.append(File.generated(config, f"{folder}/{image.name}", abs_src_path=str(image)))
    return files


def rewrite(match: re.Match[str], source: str, page_uri: str) -> str:
    """One link of the page whose repository file is ``source`` and site file ``page_uri``."""
    bang, text, target = match.groups()
    if re.match(r"^[a-z]+:", target) or target.startswith("#"):
        return match.group(0)
    path, _, anchor = target.partition("#")
    repo_path = posixpath.normpath(posixpath.join(posixpath.dirname(source), path))
    if not (REPO / repo_path).exists():
        log.warning("%s links to %s, which the repository does not have", source, target)
        return match.group(0)
    site = site_path(repo_path)
    if site is None or (REPO / repo_path).is_dir():
        return f"{text} (`{repo_path}`)" if text.strip("`") != repo_path else f"`{repo_path}`"
    relative = posixpath.relpath(site, posixpath.dirname(page_uri) or ".")
    return f"{bang}[{text}]({relative}{'#' + anchor if anchor else ''})"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Rewrite every link outside fenced code blocks as :func:`rewrite` says."""
    source, uri = repo_path_of(page.file.src_uri), page.file.src_uri
    lines, inside = [], False
    for line in markdown.split("\n"):
        if FENCE.match(line.lstrip()):
            inside = not inside
        lines.append(line if inside else LINK.sub(lambda m: rewrite(m, source, uri), line))
    return "\n".join(lines)


ROLE = re.compile(r":(?:func|meth|class|mod|attr|data|exc|obj|const):(?=<code>)")


def on_page_content(html: str, page: Any, config: Any, files: Files) -> str:
    """The API reference's docstrings cite with reStructuredText roles (``:func:`x```), which Markdown renders as the
    role's name before a code span: the name is dropped, the code span kept."""
    return ROLE.sub("", html)
