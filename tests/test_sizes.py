"""No function in the package is over 80 lines and no module over 450 (each read at once): a longer one is split."""

from __future__ import annotations

import ast

from conftest import PROJECT

PACKAGE = PROJECT / "src" / "contextuality"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 450


def test_no_module_is_over_450_lines():
    long = {str(path.relative_to(PACKAGE)): n for path in sorted(PACKAGE.rglob("*.py"))
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}  # fmt: skip
    assert long == {}


def test_no_function_is_over_80_lines():
    long = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
                if (n := node.end_lineno - first + 1) > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(PACKAGE)}:{node.name}"] = n
    assert long == {}
