"""The Snakemake Workflow Catalog's conventions: its file, the .test/ configuration, the licence, the citation and
the global container."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from conftest import PROJECT, job_counts, run_snakemake

# What the catalog's test folder ships. A user's run there (`snakemake --directory .test`, as docs/usage.md says)
# leaves results/, logs/, resources/ and .snakemake/ beside it: the tests run on a copy of what ships, so that
# what a run left there (finished, failed or locked) never changes what they see.
TEST_FOLDER_SHIPS = ("config",)


def copy_of_test_folder(destination: Path, source: Path = PROJECT / ".test") -> Path:
    """What ``source`` ships, copied to ``destination/.test``, beside a link to the project's resources/ so that its
    config's ``../resources`` paths resolve as they do from the project's own .test/."""
    copy = destination / ".test"
    for name in TEST_FOLDER_SHIPS:
        shutil.copytree(source / name, copy / name)
    (destination / "resources").symlink_to(PROJECT / "resources", target_is_directory=True)
    return copy


def _files(folder: Path) -> set[str]:
    return {str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file()}


def test_the_test_folder_holds_the_smoke_config_with_the_projects_data():
    smoke = yaml.safe_load((PROJECT / "config" / "smoke.yaml").read_text())
    catalog = yaml.safe_load((PROJECT / ".test" / "config" / "config.yaml").read_text())
    assert catalog["corpus"].pop("bundled_dir") == "../resources/sts"
    assert catalog["static"].pop("benchmark_dir") == "../resources/benchmarks"
    assert catalog.pop("static") == {}
    assert catalog == smoke


def test_the_copy_of_the_test_folder_holds_all_it_ships():
    listed = subprocess.run(["git", "ls-files", ".test"], cwd=PROJECT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: what .test/ ships is not listed")
    assert {Path(name).relative_to(".test").parts[0] for name in listed.stdout.split()} == set(TEST_FOLDER_SHIPS)


def test_what_a_users_run_left_in_the_test_folder_is_not_copied(tmp_path):
    users = tmp_path / "users"
    shutil.copytree(PROJECT / ".test" / "config", users / "config")
    left = ["results/tables/claims.csv", "logs/extract/tiny-bert.log", "resources/models/tiny-bert/record.json",
            ".snakemake/locks/0.input.lock", ".snakemake/contextuality/run_config.yaml", "report.zip"]  # fmt: skip
    for name in left:
        (users / name).parent.mkdir(parents=True, exist_ok=True)
        (users / name).write_text("left by a user's run\n")
    copy = copy_of_test_folder(tmp_path / "tests", users)
    assert _files(copy) == _files(users) - set(left) and (copy / "config" / "config.yaml").is_file()
    assert (copy.parent / "resources" / "sts").is_dir()  # the config's ../resources/sts


def test_a_dry_run_in_the_test_folder_plans_the_smoke_run(tmp_path):
    result = run_snakemake(copy_of_test_folder(tmp_path), "-n", "--cores", "2")
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
