"""Each trial of the sweep in this folder against the script's own log (own-ARGS.log, a line a
step: ``step time seen``): the harness's samples/s, and the script's own over the same last
``measure_s`` seconds of its log; the samples a step the harness counted."""
import glob
import json
import os


def own_rate(log: str, measure_s: float) -> float:
    """The script's own samples/s over the last ``measure_s`` seconds of its log."""
    rows = [tuple(map(float, s.split()[:3])) for s in open(log) if len(s.split()) >= 3]
    end = rows[-1]
    first = next(row for row in rows if row[1] >= end[1] - measure_s)
    return (end[2] - first[2]) / (end[1] - first[1])


def main() -> None:
    for res in sorted(glob.glob("mlruns/.trials/*/trial-*/result.json")):
        r = json.load(open(res))
        argv = json.load(open(os.path.join(os.path.dirname(res), "config.json")))["script"]["argv"]
        m, info = r.get("metrics") or {}, r.get("info") or {}
        log = "own-" + "_".join(a.lstrip("-") for a in argv) + ".log"
        line = f"{' '.join(argv):55s} {r['status']:5s} samples/step={info.get('samples_per_step')} harness={m.get('samples_per_s') or 0:9,.1f}"
        if os.path.exists(log) and m.get("measure_s"):
            own = own_rate(log, m["measure_s"])
            line += f" own={own:9,.1f} harness/own={m['samples_per_s'] / own:.3f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
