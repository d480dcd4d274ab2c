"""Two finished runs of one config side by side: wall time, disk and the largest job's memory, with ratios.

    python benchmarks/compare_runs.py RUN_A RUN_B [--names store device]

Each RUN is a run's working folder (its ``results/``, ``resources/models/`` and ``.snakemake/log/``). Wall time
is the sum, over Snakemake's logs of that folder (one per start: a resumed run has several), of the time from
its first to its last timestamp; disk is every file under ``results/`` (the stored vectors, the similarity
samples, the tables) and under ``resources/models/`` (the built models), counted once per inode; peak memory is
the largest ``max_rss`` of any job's benchmark file (``results/benchmarks/``: the heavy jobs). The machine's
load average is printed beside: timings on a shared machine are slower than on an idle one.
"""

from __future__ import annotations

import argparse
import os
import re
from datetime import datetime
from pathlib import Path

import pandas as pd

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")


def wall_seconds(run: Path) -> float:
    """Sum over the run's Snakemake logs of (last timestamp - first timestamp)."""
    total = 0.0
    for log in sorted((run / ".snakemake" / "log").glob("*.snakemake.log")):
        stamps = [datetime.strptime(" ".join(m.group(1).split()), "%a %b %d %H:%M:%S %Y")
                  for line in log.read_text(errors="replace").splitlines() if (m := STAMP.match(line.strip()))]  # fmt: skip
        if len(stamps) > 1:
            total += (stamps[-1] - stamps[0]).total_seconds()
    return total


def disk_bytes(*folders: Path) -> int:
    """Bytes of every file under ``folders``, each inode once (hard-linked files are one file)."""
    seen, total = set(), 0
    for folder in folders:
        for path in folder.rglob("*") if folder.is_dir() else []:
            if path.is_file() and not path.is_symlink():
                stat = path.stat()
                if (stat.st_dev, stat.st_ino) not in seen:
                    seen.add((stat.st_dev, stat.st_ino))
                    total += stat.st_size
    return total


def peak_job(run: Path) -> tuple[float, str]:
    """The largest ``max_rss`` (MB) of any benchmark file, and which job's it is."""
    best, name = 0.0, ""
    for path in (run / "results" / "benchmarks").rglob("*.tsv"):
        table = pd.read_csv(path, sep="\t")
        if len(table) and float(table["max_rss"].max()) > best:
            best, name = float(table["max_rss"].max()), str(path.relative_to(run / "results" / "benchmarks"))
    return best, name


def measure(run: Path) -> dict:
    rss, job = peak_job(run)
    return {"wall_s": wall_seconds(run), "results_gb": disk_bytes(run / "results") / 1e9,
            "models_gb": disk_bytes(run / "resources" / "models") / 1e9, "peak_rss_mb": rss, "peak_job": job}  # fmt: skip


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, nargs=2, help="two finished run folders")
    parser.add_argument("--names", nargs=2, default=["A", "B"], help="what to call them")
    args = parser.parse_args(argv)
    found = {name: measure(run) for name, run in zip(args.names, args.runs)}
    a, b = (found[name] for name in args.names)
    print(f"load average now: {' '.join(f'{v:.1f}' for v in os.getloadavg())} on {os.cpu_count()} cores")
    print(f"{'':<14} {args.names[0]:>14} {args.names[1]:>14} {'ratio B/A':>10}")
    for key, label, unit in (("wall_s", "wall time", "min"), ("results_gb", "results/", "GB"),
                             ("models_gb", "models", "GB"), ("peak_rss_mb", "largest job", "MB")):  # fmt: skip
        scale, digits = (60, 1) if unit == "min" else (1, 3 if unit == "GB" else 1)
        ratio = b[key] / a[key] if a[key] else float("nan")
        print(
            f"{label:<14} {a[key] / scale:>10.{digits}f} {unit:<3} {b[key] / scale:>10.{digits}f} {unit:<3} {ratio:>10.2f}"
        )
    print(f"largest jobs: {args.names[0]} {a['peak_job']}; {args.names[1]} {b['peak_job']}")
    return found


if __name__ == "__main__":
    main()
