"""benchmarks/code_shape.py counts what the reviews count: modules, import layers, imports, circles."""

from __future__ import annotations

import sys

from conftest import PROJECT

sys.path.insert(0, str(PROJECT / "benchmarks"))
from code_shape import import_graph, shape  # noqa: E402


def test_layers_count_the_longest_chain_and_a_circle_is_one_layer(tmp_path):
    package = tmp_path / "pkg"
    (package / "inner").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "from pkg import b\n",
        "b.py": "def f():\n    from pkg.inner.c import value\n",  # a function-level import counts
        "inner/__init__.py": "",
        "inner/c.py": "import os\nvalue = 1\n",
        "d.py": "from pkg.e import x\n",
        "e.py": "import pkg.d\nx = 1\n",
    }
    for name, text in files.items():
        (package / name).write_text(text)
    graph = import_graph(package)
    whole = shape(graph, "pkg", package)
    assert (whole["modules"], whole["import layers"], whole["imports between modules"]) == (5, 3, 4)
    assert whole["circles"] == [["pkg.d", "pkg.e"]] and whole["top-level modules"] == 4
    inner = shape(graph, "pkg.inner", package)
    assert (inner["modules"], inner["import layers"], inner["imports between modules"], inner["circles"]) == (
        1,
        1,
        0,
        [],
    )


def test_the_package_has_no_circle_and_asks_a_models_kind_only_in_its_encoder_module():
    from code_shape import model_kind_branches

    assert shape(import_graph(), "contextuality")["circles"] == []
    assert model_kind_branches() == []


def test_common_smk_keeps_only_what_the_rules_share():
    # the rest is tested functions of contextuality.workflow (run_files, gpus, rule_params, prerun)
    assert (PROJECT / "workflow" / "rules" / "common.smk").read_text().count("\n") <= 200
