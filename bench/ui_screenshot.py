"""Screenshots of `orchestrate ui` as a person sees it, for the docs, and what is on its first screen.

Starts `orchestrate ui SPEC` in PROJECT (a folder holding a finished sweep), opens the experiment's
page in headless Chromium at WIDTHxHEIGHT (MLflow's React app, its sidebar and its assistant
panel, which opens itself on a local server's first visit), waits until every trial's row is
drawn, saves the screenshot and prints, for each row, its cells on the first screen and those cut
off; `--bottom FILE` also saves the table scrolled to its last rows (out of memory and skipped,
which sort last).

    python bench/ui_screenshot.py /tmp/p sweeps/bert_tiny.yaml docs/mlflow_ui.png --rows 16 \
        --bottom docs/mlflow_ui_bottom.png

Needs Chromium (Debian: apt-get install chromium).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from browser import CHROMIUM, Browser, free_port, read_table, stop_group, wait_for_page  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("project", type=Path)
    p.add_argument("spec")
    p.add_argument("out", type=Path)
    p.add_argument("--width", type=int, default=1400)
    p.add_argument("--height", type=int, default=900)
    p.add_argument("--rows", type=int, default=1, help="wait until this many rows are drawn")
    p.add_argument("--bottom", type=Path, help="also save the table scrolled to its last row here")
    args = p.parse_args()
    if CHROMIUM is None:
        print("ui_screenshot: chromium is not installed (Debian: apt-get install chromium)", file=sys.stderr)
        return 2
    from orchestrator.spec.load import load_spec

    name = load_spec(args.project / args.spec).name
    port = free_port()
    log = args.out.with_suffix(".ui.log")
    orchestrate = str(Path(sys.executable).with_name("orchestrate"))
    with open(log, "w") as out:
        ui = subprocess.Popen([orchestrate, "ui", args.spec, "--port", str(port)], cwd=args.project, stdout=out,
                              stderr=subprocess.STDOUT, start_new_session=True)
    started = time.monotonic()
    try:
        url = wait_for_page(ui, log, port, name)
        print(f"ui_screenshot: the server answered after {time.monotonic() - started:.1f} s: {url}")
        browser = Browser(args.out.parent / ".chromium-profile")
        try:
            browser.open(url, args.width, args.height)
            table = read_table(browser, args.rows)
            browser.screenshot(args.out)
            if args.bottom is not None:
                browser.evaluate("document.querySelector('.ag-body-viewport').scrollTop = 1e6")
                time.sleep(1)
                browser.screenshot(args.bottom)
        finally:
            browser.close()
    finally:
        stop_group(ui)
        log.unlink(missing_ok=True)
    import shutil

    shutil.rmtree(args.out.parent / ".chromium-profile", ignore_errors=True)
    print(f"ui_screenshot: {args.out} ({table['width']}x{table['height']}), {len(table['rows'])} rows")
    for row in table["rows"]:
        name_cell = row.get("attributes.`Run Name`", {})
        if not name_cell.get("whole", True):
            print(f"  (the name {name_cell.get('text')!r} is cut off)")
        shown = [c.split("`")[1] if "`" in c else c for c, cell in row.items() if cell["shown"]]
        cut = [c.split("`")[1] if "`" in c else c for c, cell in row.items() if not cell["shown"]]
        print(f"  {name_cell.get('text', '?'):<40s} {name_cell.get('color') or '':<18s} on screen: {', '.join(shown)}; off: {', '.join(cut) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
