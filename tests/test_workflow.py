"""The workflow as users run it: lint, a dry run of the default config, and what every snakemake start imports."""

from __future__ import annotations

import os
import re
import sys

from conftest import PROJECT, job_counts, run_command, run_snakemake, write_config


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
        tmp_path,
        "-n",
        "--cores",
        "4",
        "--resources",
        "gpu=2",
        configfile=write_config(tmp_path / "c.yaml", base_config),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    counts = job_counts(result.stdout)
    assert counts["sts_pairs"] == 1 and counts["corpus"] == 1 and counts["words"] == 1
    # each model over STS and over the senses' usages corpus (the one extract rule over {corpus})
    assert counts["extract"] == 2 * 4 * len(base_config["models"])
    assert counts["manifest"] == 2 * len(base_config["models"])
    # every shard job asks for extraction.threads threads
    blocks = [block for block in result.stdout.split("\n\n") if "rule extract:" in block]
    assert blocks and all("threads: 3" in block for block in blocks), blocks[:1]


def test_the_snakefile_imports_of_the_project_load_no_pandas():
    """Every snakemake start (a dry run, a cluster job) imports what common.smk imports: pandas there
    would add about 0.9 s to each."""
    imports = re.findall(
        r"^from (contextuality[\w.]*) import", (PROJECT / "workflow/rules/common.smk").read_text(), re.M
    )
    assert len(imports) >= 5
    code = f"import sys\nimport {', '.join(sorted(set(imports)))}\nprint('pandas' in sys.modules)"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT / "src"), os.environ.get("PYTHONPATH")])),
    }
    result = run_command([sys.executable, "-c", code], env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_a_run_whose_vectors_cannot_fit_stops_before_any_job(tmp_path, base_config):
    """A random model 4,096 dims wide and 200 layers deep stores hundreds of GB of STS: the run stops at its start,
    naming the size, instead of at its first shard (the command-line case of contextuality.workflow.prerun.before_jobs)."""
    config = base_config | {
        "models": {
            "huge": {
                "source": "random",
                "architecture": "bert",
                "n_hidden_layers": 199,
                "hidden_size": 4096,
                "vocab_size": 400,
            }
        },
        "senses": {"enabled": False},
    }
    path = write_config(tmp_path / "huge.yaml", config)
    result = run_snakemake(tmp_path, "--cores", "1", configfile=path)
    assert result.returncode != 0
    assert "not enough disk for this run: its stored vectors take about" in result.stderr + result.stdout
    assert not (tmp_path / "results").exists() and not (tmp_path / "logs").exists()  # no job ran
    # a dry run only prints it: tests/workflow/test_before_jobs.py


def test_every_rule_is_defined_under_every_config():
    """No rule under an `if` (the rule set, --list-rules and the lint are the same whatever the config): each rule
    and checkpoint starts a line of its file; which of two rules writes a file is a ruleorder's choice."""
    nested = [
        f"{path.name}:{number}: {line.strip()}"
        for path in sorted((PROJECT / "workflow" / "rules").glob("*.smk"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.match(r"\s+(rule|checkpoint) \w+:", line)
    ]
    assert nested == []
