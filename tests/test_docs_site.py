"""The documentation site (``mkdocs.yml``): it builds in strict mode, so a broken link, a missing page or an API
reference that no longer matches the code fails here, and a built page renders its navigation and its tables in a
real browser."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urljoin

import pytest

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)")


def test_the_readme_and_the_benchmarks_page_stay_sized_to_their_readers_and_their_links_resolve() -> None:
    """Issue 61: a README of at most 12,000 characters, a benchmarks page under 30,000, every link a file."""
    for name, limit in (("README.md", 12_000), ("benchmarks/README.md", 30_000)):
        text = (REPO / name).read_text()
        assert len(text) <= limit, f"{name} has {len(text)} characters, more than {limit}"
        targets = [t for t in LINK.findall(text) if not re.match(r"^[a-z]+:", t)]
        missing = [t for t in targets if not (REPO / Path(name).parent / t).exists()]
        assert not missing, f"{name} links to files the repository does not have: {missing}"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built with ``mkdocs build --strict`` into a temporary folder."""
    for package in ("mkdocs", "material", "mkdocstrings"):
        pytest.importorskip(package, reason="the documentation's packages are not installed: pip install hfncl[docs]")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr[done.stderr.find("INFO") :][-3000:]
    return out


@pytest.mark.slow  # the whole site's build, about 10 s
def test_the_site_builds_in_strict_mode_with_every_page_of_the_nav(site: Path) -> None:
    pages = [
        "index.html",
        "getting-started.html",
        "training.html",
        "data-formats.html",
        "methods/index.html",
        "methods/ncr.html",
        "plugins.html",
        "audit.html",
        "hub.html",
        "reliability.html",
        "benchmarks/index.html",
        "api.html",
    ]
    assert not [page for page in pages if not (site / page).is_file()]
    api = (site / "api.html").read_text()
    assert "Retriever" in api and "encode_texts" in api and "run_experiment" in api  # generated from the docstrings
    hooks = (site / "plugins.html").read_text()
    assert 'id="divide"' in hooks and 'id="rectify"' in hooks  # the hook reference generated from hfncl/hookspecs/


def _chromium() -> str | None:
    """A Chromium or Chrome executable on PATH (the Debian package's ``chromium``), or ``None``."""
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)


@pytest.mark.slow
def test_a_page_renders_its_navigation_and_a_table_in_a_real_browser(site: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    executable = _chromium()
    if executable is None:
        pytest.skip("no chromium on PATH (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto((site / "index.html").as_uri())
            nav = page.locator("nav.md-nav--primary a.md-nav__link")
            nav_links = [text.strip() for text in nav.all_inner_texts()]
            nav_shown = page.get_by_role("link", name="Getting started").first.is_visible()
            table = page.locator("article table", has=page.locator("th", has_text="plugin")).first
            table_shown = table.is_visible()
            header = table.locator("th").all_inner_texts()
            rows = table.locator("tbody tr").count()
            audit_link = page.locator("nav.md-nav--primary a.md-nav__link", has_text="The audit").first
            page.goto(urljoin(page.url, audit_link.get_attribute("href")))
            title = page.title()
        finally:
            browser.close()
    assert {"Getting started", "Training on real features", "Writing a plugin", "Benchmarks", "API"} <= set(nav_links)
    assert nav_shown, "the navigation is not visible"
    assert table_shown and header[:2] == ["plugin", "paper"] and rows >= 9, (header, rows)
    assert title.startswith("The audit"), title  # the navigation's links lead to their pages
