"""The workflow as users run it: lint, a dry run of the default config, and what every snakemake start imports."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import PROJECT, job_counts, run_snakemake, write_config


def test_lint_is_clean(tmp_path):
    result = run_snakemake(PROJECT, "--lint")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Congratulations" in result.stdout + result.stderr


def test_dry_run_plans_the_default_jobs_and_one_extraction_job_per_shard_and_model(tmp_path, base_config):
    """The default config, with 4 shards and 3 threads a shard job (one dry run for both: each snakemake start costs
    seconds)."""
    base_config["extraction"]["n_shards"] = 4
    base_config["extraction"]["threads"] = 3
    result = run_snakemake(
        tmp_path, "-n", "--cores", "4", "--resources", "gpu=2", configfile=write_config(tmp_path / "c.yaml", base_config)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    counts = job_counts(result.stdout)
    assert counts["sts_pairs"] == 1 and counts["corpus"] == 1 and counts["words"] == 1
    assert counts["extract"] == 4 * len(base_config["models"])
    assert counts["manifest"] == len(base_config["models"])
    # every shard job asks for extraction.threads threads
    blocks = [block for block in result.stdout.split("\n\n") if "rule extract:" in block]
    assert blocks and all("threads: 3" in block for block in blocks), blocks[:1]


def test_the_snakefile_imports_of_the_project_load_no_pandas():
    """Every snakemake start (a dry run, a cluster job) imports what common.smk imports: pandas there
    would add about 0.9 s to each."""
    imports = re.findall(r"^from (contextuality[\w.]*) import", (PROJECT / "workflow/rules/common.smk").read_text(), re.M)
    assert len(imports) >= 5
    code = f"import sys\nimport {', '.join(sorted(set(imports)))}\nprint('pandas' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT / "src"), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
