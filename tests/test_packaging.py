"""The project's wheel is self-sufficient: a job whose package is installed rather than imported from
``src/`` (a Kubernetes pod's image: Snakemake deploys it no ``src/`` outside a git checkout) finds every
file the package reads at run time. The cluster proof's first pods failed on the config schema, which the
package looked for beside a source checkout."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile

from conftest import PROJECT


def test_the_wheel_carries_the_config_schema_and_an_installed_package_reads_it(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(PROJECT / name, source / name)
    # symlinks kept: the package's schema is a link to workflow/schemas/, which the wheel must resolve
    shutil.copytree(
        PROJECT / "src", source / "src", symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    shutil.copytree(PROJECT / "workflow" / "schemas", source / "workflow" / "schemas")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("contextuality-*.whl")
    schema = (PROJECT / "workflow" / "schemas" / "config.schema.yaml").read_bytes()
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read("contextuality/workflow/config.schema.yaml") == schema
        archive.extractall(tmp_path / "installed")
    # the installed copy alone on the path (no src/, no project folder), from another folder
    probe = (
        "import sys, yaml; from contextuality.workflow.schema import SCHEMA, load_settings; print(SCHEMA); "
        "assert load_settings(yaml.safe_load(open(sys.argv[1]))).models"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, str(PROJECT / "config" / "smoke.yaml")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(tmp_path / "installed"), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(tmp_path / "installed" / "contextuality" / "workflow" / "config.schema.yaml")
