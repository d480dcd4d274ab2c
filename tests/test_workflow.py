"""The workflow as users run it: lint, dry runs, config validation."""

from __future__ import annotations

from conftest import PROJECT, job_counts, run_snakemake, write_config


def test_lint_is_clean(tmp_path):
    result = run_snakemake(PROJECT, "--lint")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Congratulations" in result.stdout + result.stderr


def test_dry_run_plans_the_default_jobs(tmp_path, base_config):
    result = run_snakemake(tmp_path, "-n", "--cores", "2", configfile=write_config(tmp_path / "c.yaml", base_config))
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout)
    assert counts["sts_pairs"] == 1 and counts["corpus"] == 1 and counts["words"] == 1


def test_unknown_key_fails_naming_it(tmp_path, base_config):
    base_config["corpus"]["yeers"] = [2012]
    result = run_snakemake(tmp_path, "-n", "--cores", "1", configfile=write_config(tmp_path / "c.yaml", base_config))
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "corpus: unknown key(s) 'yeers'; allowed: bundled_dir" in output
    assert "'patternProperties'" not in output  # one sentence, not a schema dump
