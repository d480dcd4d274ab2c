"""Assertions of tests/slurm/run.sh: jobs went through sbatch, GPUs came from SLURM, outputs equal a local run's."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

import h5py
import numpy as np

# `localrules:` the downloads (compute nodes often have no network); `all` has no action; the rest are seconds of
# work (a cluster job would wait longer in the queue than it runs): similarity_rows joins two small tables,
# layer_file writes a few kB of HDF5 metadata, sts_pairs parses the bundled release files, and the figures, tables
# and report pages are drawn from small tables
LOCAL_RULES = {"download_model", "corpus", "wordnet", "tagger", "similarity_rows", "layer_file", "all", "sts_pairs",
               "figures", "model_figures", "summary", "table1", "report_pages", "model_pages", "senses_figures",
               "similarity_figures", "atlas"}  # fmt: skip
IMAGE_SUFFIXES = {".png", ".pdf"}  # matplotlib embeds creation dates in PDFs; figures only need to exist


def fail(message: str) -> None:
    print(f"FAIL: {message}")
    sys.exit(1)


def job_stats(log: str) -> Counter:
    counts, table = Counter(), False
    for line in log.splitlines():
        if line.startswith("Job stats"):
            table, counts = True, Counter()
            continue
        if table:
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit() and parts[0] != "total":
                counts[parts[0]] = int(parts[1])
            elif counts and not line.strip():
                table = False
    return counts


def check_sbatch(log_path: Path, sacct_path: Path) -> set[str]:
    log = log_path.read_text()
    planned = job_stats(log)
    local = Counter(re.findall(r"^localrule (\w+):", log, flags=re.M))
    remote = Counter(re.findall(r"^(?:rule|checkpoint) (\w+):", log, flags=re.M))
    if not set(local) <= LOCAL_RULES:
        fail(f"rules run outside SLURM: {sorted(set(local) - LOCAL_RULES)}")
    rows = [line.split("|") for line in sacct_path.read_text().splitlines() if line.strip()]
    bad = [row for row in rows if row[2] != "COMPLETED" or row[3] != "0:0"]
    if bad:
        fail(f"sacct rows not COMPLETED 0:0: {bad}")
    by_rule = Counter(re.sub(r"_wildcards_.*$", "", row[1]).removeprefix("rule_") for row in rows)
    expected = Counter({rule: n for rule, n in planned.items() if rule not in LOCAL_RULES})
    if by_rule != expected or remote != expected:
        fail(f"planned non-local jobs {dict(expected)}, submitted {dict(remote)}, in sacct {dict(by_rule)}")
    print(
        f"ok: all {sum(expected.values())} non-local jobs went through sbatch and are COMPLETED in sacct "
        f"({dict(sorted(by_rule.items()))}); local: {dict(local)}"
    )
    return {row[0] for row in rows}


def check_devices(slurm_dir: Path, job_ids: set[str], n_extract: int) -> None:
    path = slurm_dir / "resources" / ".gpu-leases" / "fake-devices.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    if len(records) != n_extract:
        fail(f"{len(records)} device records for {n_extract} extraction jobs")
    for record in records:
        if record["slurm_job_id"] not in job_ids:
            fail(f"extraction outside a listed SLURM job: {record}")
        if record["cuda_visible_devices"] not in {"0", "1"} or record["device"] != "cuda:0":
            fail(f"SLURM did not hand this job one GPU, or the job ignored it: {record}")
    for gpu in {"0", "1"}:
        spans = sorted((r["start"], r["end"]) for r in records if r["cuda_visible_devices"] == gpu)
        if any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:])):
            fail(f"two jobs held GPU {gpu} at once: {spans}")
    used = Counter(r["cuda_visible_devices"] for r in records)
    print(
        f"ok: each extraction job got one GPU from SLURM (CUDA_VISIBLE_DEVICES {dict(used)}), used cuda:0, "
        "never two at once on one GPU"
    )


def h5_equal(a: Path, b: Path) -> None:
    with h5py.File(a) as fa, h5py.File(b) as fb:
        names_a, names_b = [], []
        fa.visit(names_a.append)
        fb.visit(names_b.append)
        if names_a != names_b:
            fail(f"{a.name}: datasets differ {names_a} vs {names_b}")
        for name in names_a:
            if isinstance(fa[name], h5py.Dataset):
                x, y = fa[name][()], fb[name][()]
                if x.dtype != y.dtype or x.shape != y.shape or not np.array_equal(x, y):
                    fail(f"{a}: dataset {name} differs")
        attrs_a, attrs_b = dict(fa.attrs), dict(fb.attrs)
        if attrs_a.keys() != attrs_b.keys() or any(np.any(attrs_a[k] != attrs_b[k]) for k in attrs_a):
            fail(f"{a}: attributes differ")


def check_outputs(local: Path, slurm: Path, label: str = "SLURM") -> None:
    files_local = {p.relative_to(local) for p in (local / "results").rglob("*") if p.is_file()}
    files_slurm = {p.relative_to(slurm) for p in (slurm / "results").rglob("*") if p.is_file()}
    if files_local != files_slurm:
        fail(
            f"different files: only local {sorted(files_local - files_slurm)[:10]}, "
            f"only {label} {sorted(files_slurm - files_local)[:10]}"
        )
    kinds = Counter()
    for rel in sorted(files_local):
        if rel.suffix in IMAGE_SUFFIXES:
            kinds["figures (exist)"] += 1
        elif rel.parts[1] == "benchmarks":  # results/benchmarks/: each job's own timings, which no two runs share
            kinds["timings (exist)"] += 1
        elif rel.suffix == ".h5":
            h5_equal(local / rel, slurm / rel)
            kinds["HDF5 (equal datasets and attrs)"] += 1
        else:
            if (local / rel).read_bytes() != (slurm / rel).read_bytes():
                fail(f"{rel} differs between the local and the {label} run")
            kinds[f"{rel.suffix or 'other'} (byte-identical)"] += 1
    print(f"ok: outputs equal the local run's: {dict(kinds)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--slurm-log", type=Path, required=True)
    parser.add_argument("--sacct", type=Path, required=True)
    parser.add_argument("--local", type=Path, required=True)
    parser.add_argument("--slurm", type=Path, required=True)
    args = parser.parse_args()
    job_ids = check_sbatch(args.slurm_log, args.sacct)
    stats = job_stats(args.slurm_log.read_text())  # the STS shards and the usages' shards both extract on a GPU
    check_devices(args.slurm, job_ids, stats["extract"])
    check_outputs(args.local, args.slurm)


if __name__ == "__main__":
    main()
