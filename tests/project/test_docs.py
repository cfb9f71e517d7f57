"""The README is the front door and the site under docs/ holds the rest: the README stays short,
its commands are CI's, its links and its spec excerpt are true, and the site builds with
``mkdocs build --strict`` (every link and anchor resolves, every page is in the navigation).
Where MkDocs is not installed the build is skipped with the reason, except in CI (``CI=true``),
where it fails."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from jsonschema import Draft202012Validator

from conftest import ROOT
from orchestrator.spec import knobs
from orchestrator.spec.schema import spec_schema
from orchestrator.spec.load import load_spec
from servers import unavailable

README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
MAX_README_LINES = 250


def test_the_readme_is_a_front_door() -> None:
    assert len(README.splitlines()) <= MAX_README_LINES, "move the detail to a page under docs/"


def _block_after(text: str, marker: str) -> str:
    """The first fenced code block after ``marker``."""
    rest = text[text.index(marker):]
    return re.search(r"```\w*\n(.*?)\n```", rest, re.S).group(1)


def test_the_readme_s_test_command_is_the_one_ci_runs() -> None:
    readme = _block_after(README, "**Set up and run the tests**")
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert ci[-1] == readme
    assert "'.[test,docs]'" in readme  # the docs extra: the build below runs in CI
    quoted = [line for page in DOCS.rglob("*.md") for line in page.read_text().splitlines() if "pytest -n 2" in line]
    assert quoted and set(quoted) == {readme}  # the pages quote the same command


def test_the_readme_s_links_resolve() -> None:
    targets = re.findall(r"\]\(([^)\s]+)\)", README)
    local = [t.split("#")[0] for t in targets if "://" not in t]
    assert len(local) >= 10
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing


def test_the_readme_s_spec_excerpt_is_the_shipped_spec() -> None:
    excerpt = _block_after(README, "## What a run looks like")
    shipped = (ROOT / "sweeps" / "bert_tiny.yaml").read_text()
    assert excerpt in shipped


def test_the_spec_page_s_example_is_a_valid_spec(tmp_path: Path) -> None:
    example = _block_after((DOCS / "spec.md").read_text(), "```yaml")
    path = tmp_path / "spec.yaml"
    path.write_text(example)
    load_spec(path)
    assert Draft202012Validator(spec_schema()).is_valid(yaml.safe_load(example))


def test_every_knob_is_on_the_knobs_page() -> None:
    page = (DOCS / "knobs.md").read_text()
    rows = set(re.findall(r"^\| `(\w+)`(?:, `(\w+)`)? \|", page, re.M))
    named = {name for row in rows for name in row if name}
    assert named == set(knobs.KNOBS)


def test_every_file_under_docs_is_linked_from_a_page() -> None:
    """A lab log kept under docs/ is linked from the page that quotes it (or from the list at the
    end of the benchmarks page), so that the site serves it."""
    linked = set()
    for page in DOCS.rglob("*.md"):
        for target in re.findall(r"\]\(([^)#\s]+)", page.read_text()):
            if "://" not in target:
                linked.add((page.parent / target).resolve())
    files = [p for p in DOCS.rglob("*") if p.is_file() and p.suffix != ".md"]
    assert len(files) > 30
    assert [str(p.relative_to(DOCS)) for p in files if p.resolve() not in linked] == []


def test_the_site_builds_with_every_link_resolved(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    if mkdocs is None:
        unavailable("mkdocs is not installed (pip install -e '.[docs]')")
    proc = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                          capture_output=True, text=True, timeout=240,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    site = tmp_path / "site"
    for page in ("index.html", "reference/spec/index.html", "benchmarks/index.html", "spec.schema.json",
                 "plots/throughput.png", "gpu/bench.log"):
        assert (site / page).is_file(), page
    assert "batch_size" in (site / "reference" / "spec" / "index.html").read_text()
