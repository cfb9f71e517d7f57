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
import time
from pathlib import Path

import pytest
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
    quoted = [line for page in DOCS.rglob("*.md") for line in page.read_text().splitlines() if "pytest -n 3" in line]
    assert quoted and set(quoted) == {readme}  # the pages quote the same command


def test_the_readme_tells_how_torch_is_installed_on_each_platform() -> None:
    """pip does not pick a build by hardware: the README says what the first command installs on
    each kind of machine, and gives CPU-only Linux PyTorch's CPU index, with the same pin
    as the top commands; the getting-started page says the same."""
    pin = re.search(r"pip install torch==([\d.]+)", _block_after(README, "**Set up and run a real sweep**")).group(1)
    assert pin == re.search(r"torch==([\d.]+)", _block_after(README, "**Set up and run the tests**")).group(1)
    assert "pip does not look at the hardware" in README
    rows = {line.split("|")[1].strip(): line for line in README.splitlines() if line.startswith("| ")}
    assert {"Mac (Apple Silicon)", "Linux with an NVIDIA GPU", "Linux without a GPU", "Windows"} <= set(rows)
    assert (f"`.venv/bin/pip install torch=={pin} --index-url https://download.pytorch.org/whl/cpu`"
            in rows["Linux without a GPU"])
    start, end = README.index("pip does not look at the hardware"), README.index("torch comes first on purpose")
    assert README[start:end] in (DOCS / "getting-started.md").read_text()


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
    styles = {DOCS / css for css in yaml.safe_load((ROOT / "mkdocs.yml").read_text()).get("extra_css", [])}
    files = [p for p in DOCS.rglob("*") if p.is_file() and p.suffix != ".md" and p not in styles]
    assert len(files) > 30
    assert [str(p.relative_to(DOCS)) for p in files if p.resolve() not in linked] == []



# What may sit at docs/'s root beside the pages: the generated schema (the specs' modelines name
# ../docs/spec.schema.json) and the results page's two screenshots. Logs and data go to docs/logs/
# (docs/gpu/ for the GPU sessions').
ROOT_FILES = {"spec.schema.json", "mlflow_ui.png", "mlflow_ui_bottom.png"}


def test_docs_root_holds_pages_only() -> None:
    at_root = {p.name for p in DOCS.iterdir() if p.is_file() and p.suffix != ".md"}
    assert at_root - ROOT_FILES == set(), "move logs and data to docs/logs/ and link them from there"
    assert (DOCS / "logs").is_dir() and len(list((DOCS / "logs").iterdir())) > 30


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as ``mkdocs build --strict`` makes it (every link and anchor resolved)."""
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    if mkdocs is None:
        unavailable("mkdocs is not installed (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=240,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_the_site_builds_with_every_link_resolved(site: Path) -> None:
    for page in ("index.html", "reference/spec/index.html", "benchmarks/index.html", "spec.schema.json",
                 "plots/throughput.png", "gpu/bench.log", "logs/overhead_cpu.log"):
        assert (site / page).is_file(), page
    assert "batch_size" in (site / "reference" / "spec" / "index.html").read_text()


def test_the_search_page_is_not_named_like_the_search_box(site: Path) -> None:
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    titles = [title for entry in nav for title in entry]
    assert "Search" not in titles and "How the search works" in titles
    assert "<h1 id=\"how-the-search-works\">How the search works" in (site / "search" / "index.html").read_text()


# Each code element in a table cell: its text and, where the browser wrapped it, the two characters
# on either side of each line break (read character by character with a Range).
CODE_IN_CELLS_JS = """[...document.querySelectorAll('.md-typeset table code')].map(c => {
  const breaks = [], range = document.createRange();
  for (const t of [...c.childNodes].filter(n => n.nodeType === 3)) {
    let top = null;
    for (let i = 0; i < t.length; i++) {
      range.setStart(t, i); range.setEnd(t, i + 1);
      const box = range.getBoundingClientRect();
      if (box.width === 0) continue;
      if (top !== null && box.top > top + 2) breaks.push(t.data.slice(i - 1, i + 1));
      top = box.top;
    }
  }
  return {text: c.textContent, breaks};
})"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed (.ci/run installs it)")
def test_code_in_narrow_table_cells_breaks_only_between_words(site: Path, tmp_path: Path) -> None:
    """In a real browser at a phone's width, code in table cells wraps, but never between two
    letters of a word (the issue's "bert_memory.yam" / "l")."""
    from report.test_ui_browser import Browser

    browser = Browser(tmp_path / "chromium")
    try:
        codes = []
        for page in ("getting-started", "benchmarks", "knobs", "index"):
            url = (site / page / "index.html" if page != "index" else site / "index.html").as_uri()
            browser.open(url, 420, 900)
            deadline = time.monotonic() + 30
            while browser.evaluate("document.readyState + ' ' + location.href") != f"complete {url}":
                assert time.monotonic() < deadline, page
                time.sleep(0.2)
            found = browser.evaluate(CODE_IN_CELLS_JS)
            assert found, page  # each of these pages has code in its tables
            codes += found
    finally:
        browser.close()
    assert len(codes) > 100 and any(c["text"] == "sweeps/bert_memory.yaml" for c in codes)
    assert sum(bool(c["breaks"]) for c in codes) > 5  # narrow enough that code does wrap
    inside_words = [(c["text"], pair) for c in codes for pair in c["breaks"] if re.fullmatch(r"\w\w", pair)]
    assert inside_words == []


# -- docs/experiment.md: the tutorial runs ---------------------------------------------------------

def _blocks(text: str, lang: str) -> list[str]:
    """The fenced code blocks of ``text`` opened with ```` ```lang ```` ("" for a plain fence)."""
    out: list[str] = []
    fence: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("```") and fence is None:
            fence, lines = line[3:].strip(), []
        elif line.startswith("```"):
            if fence == lang:
                out.append("\n".join(lines))
            fence = None
        elif fence is not None:
            lines.append(line)
    return out


def test_every_code_block_of_the_tutorial_is_in_the_example() -> None:
    page = (DOCS / "experiment.md").read_text()
    module = (ROOT / "examples" / "my_experiment.py").read_text()
    spec = (ROOT / "examples" / "my_experiment.yaml").read_text()
    python, specs = _blocks(page, "python"), _blocks(page, "yaml")
    assert len(python) >= 5 and all(block in module for block in python)
    assert "def build(" in "".join(python) and "PARAMS" in "".join(python)  # the whole contract is shown
    tutorial = [b for b in specs if "examples.my_experiment" in b]
    assert len(tutorial) == 1 and tutorial[0] in spec
    hf = [b for b in specs if "experiments.hf" in b]
    assert len(hf) == 2
    for block in hf:  # the Hugging Face examples are valid specs too, given a name and a space
        text = "name: t\n" + block + "\nspace:\n  batch_size: [8]\n"
        assert Draft202012Validator(spec_schema()).is_valid(yaml.safe_load(text)), block


def run_page(page: str, tmp_path: Path) -> list[str]:
    """A page's ``$ orchestrate ...`` sessions, in a folder holding examples/ (the working
    directory finds it), as a user runs them; every output line the page shows, up to its
    elisions, is in what they print. Returns the commands run."""
    import shutil as sh
    import subprocess

    sh.copytree(ROOT / "examples", tmp_path / "examples", ignore=sh.ignore_patterns("__pycache__"))
    sessions = [b for b in _blocks(page, "") if b.startswith("$ orchestrate")]
    assert sessions
    ran = []
    for session in sessions:
        for part in re.split(r"^\$ ", session, flags=re.M)[1:]:
            command, *shown = part.splitlines()
            # pasted into a shell with the venv active, as the README's set-up leaves it
            proc = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=280)
            assert proc.returncode == 0, (command, proc.stdout + proc.stderr)
            ran.append(command)
            for line in shown:
                head = line.split("...")[0].split("(/path")[0].rstrip()
                if head:
                    assert head in proc.stdout, (command, head, proc.stdout)
    return ran


@pytest.mark.slow
def test_the_tutorial_s_commands_run_and_print_what_the_page_shows(tmp_path: Path) -> None:
    """The dry run, the sweep, the report and the best configuration of the module tutorial."""
    ran = run_page((DOCS / "experiment.md").read_text(), tmp_path)
    assert ran[:2] == ["orchestrate examples/my_experiment.yaml --dry-run", "orchestrate examples/my_experiment.yaml"]
    assert {"orchestrate report examples/my_experiment.yaml", "orchestrate best examples/my_experiment.yaml"} <= set(ran)


# -- docs/script.md: the training script page runs ------------------------------------------------

def test_the_script_page_s_spec_is_the_example_s() -> None:
    page = (DOCS / "script.md").read_text()
    (block,) = _blocks(page, "yaml")
    assert block in (ROOT / "examples" / "scripts" / "train.yaml").read_text()
    assert "script: train.py" in block and "{batch_size}" in block


@pytest.mark.slow
def test_the_script_page_s_commands_run_and_print_what_the_page_shows(tmp_path: Path) -> None:
    """The dry run, the sweep, best and the report of the unchanged script, as the page shows them."""
    ran = run_page((DOCS / "script.md").read_text(), tmp_path)
    assert ran == ["orchestrate examples/scripts/train.yaml --dry-run", "orchestrate examples/scripts/train.yaml",
                   "orchestrate best examples/scripts/train.yaml", "orchestrate report examples/scripts/train.yaml"]
