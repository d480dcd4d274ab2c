"""The Snakemake Workflow Catalog's conventions: its file, the .test/ configuration, the licence, the citation and
the global container."""

from __future__ import annotations

import re
import tomllib

import yaml

from conftest import PROJECT, job_counts, run_snakemake


def test_the_test_folder_holds_the_smoke_config_with_the_projects_data():
    smoke = yaml.safe_load((PROJECT / "config" / "smoke.yaml").read_text())
    catalog = yaml.safe_load((PROJECT / ".test" / "config" / "config.yaml").read_text())
    assert catalog["corpus"].pop("bundled_dir") == "../resources/sts"
    assert catalog["static"].pop("benchmark_dir") == "../resources/benchmarks"
    assert catalog.pop("static") == {}
    assert catalog == smoke


def test_a_dry_run_in_the_test_folder_plans_the_smoke_run(tmp_path):
    result = run_snakemake(PROJECT / ".test", "-n", "--cores", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout)
    assert counts["materialise_model"] == 2 and counts["extract"] == 2 * 5, (
        counts
    )  # tiny-bert's 1 shard, tiny-gpt2's 4; over STS and the usages


def test_the_catalog_file_declares_conda_apptainer_and_the_report():
    usage = yaml.safe_load((PROJECT / ".snakemake-workflow-catalog.yml").read_text())["usage"]
    deployment = usage["software-stack-deployment"]
    assert deployment["conda"] is True and deployment["apptainer"] is True and usage["report"] is True


def test_the_licence_is_the_mit_licence_pyproject_names_and_the_citation_names_the_paper():
    license_text = (PROJECT / "LICENSE").read_text()
    assert license_text.startswith("MIT License") and "Permission is hereby granted, free of charge" in license_text
    assert tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]["license"] == {"text": "MIT"}
    citation = yaml.safe_load((PROJECT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and citation["license"] == "MIT"
    paper = citation["preferred-citation"]
    assert paper["doi"] == "10.18653/v1/D19-1006" and paper["authors"][0]["family-names"] == "Ethayarajh"


def test_the_snakefile_names_the_job_image_as_its_global_container():
    """A local image file built from the job image's recipe (no registry), which docs/usage.md says how to build."""
    snakefile = (PROJECT / "Snakefile").read_text()
    default = r"os\.path\.join\(workflow\.basedir, \"contextuality-image\.sif\"\)"
    assert re.search(r"^container: os\.environ\.get\(\"CONTEXTUALITY_IMAGE\", " + default + r"\)$", snakefile, re.M)
    usage = (PROJECT / "docs" / "usage.md").read_text()
    assert "apptainer build contextuality-image.sif docker-daemon://contextuality:0.1" in usage
    assert (PROJECT / "profiles" / "kubernetes" / "image" / "Dockerfile").is_file()
