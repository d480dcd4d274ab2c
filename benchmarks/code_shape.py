"""The code's shape, as issue reviews count it: modules, import layers and imports between modules, for the
package and for each of its stages named on the command line; circles; model-kind branches outside the encoder
module; the length of common.smk; rules defined under an ``if``; long functions.

    python benchmarks/code_shape.py [--scope measure --scope senses]

Every import statement counts, function-level ones too. A module's import layer is 1 where it imports no
module of the scope, else one more than the highest layer it imports; the modules of a circle share one layer, and the circle is listed.
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import networkx as nx

PROJECT = Path(__file__).resolve().parents[1]
PACKAGE = PROJECT / "src" / "contextuality"
ENCODER_MODULE = "contextuality.extraction.encoders"
MODEL_KINDS = re.compile(r"isinstance\([^)]*\b(ElmoModel|PreTrainedModel|GPT2\w*|Bert\w*)\b")


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``path`` imports: ``from a.b import c`` names module a.b.c where it is one."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def import_graph(package: Path = PACKAGE) -> nx.DiGraph:
    paths = {module_name(path, package): path for path in sorted(package.rglob("*.py"))}
    graph = nx.DiGraph()
    graph.add_nodes_from(name for name, path in paths.items() if path.name != "__init__.py")
    for name in graph.nodes:
        for target in imported_modules(paths[name], set(paths)):
            if target != name and target in graph:
                graph.add_edge(name, target)
    return graph


def shape(graph: nx.DiGraph, prefix: str, package: Path = PACKAGE) -> dict:
    """Modules, import layers, imports between them and circles, for the modules under ``prefix``."""
    scope = graph.subgraph([name for name in graph if name == prefix or name.startswith(prefix + ".")])
    circles = [sorted(part) for part in nx.strongly_connected_components(scope) if len(part) > 1]
    # a circle's modules count as one layer (the condensed graph)
    condensed = nx.condensation(scope)
    layer = {}
    for node in reversed(list(nx.topological_sort(condensed))):
        layer[node] = 1 + max((layer[target] for target in condensed.successors(node)), default=0)
    layers = max(layer.values(), default=0)
    top = package.joinpath(*prefix.split(".")[1:])
    return {
        "scope": prefix,
        "modules": scope.number_of_nodes(),
        "top-level modules": sum(1 for path in top.glob("*.py") if path.name != "__init__.py"),
        "import layers": layers,
        "imports between modules": scope.number_of_edges(),
        "circles": circles,
    }


def model_kind_branches() -> list[str]:
    """``isinstance`` tests of a model's kind outside the encoder module, as file:line."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if module_name(path) == ENCODER_MODULE:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if MODEL_KINDS.search(line):
                found.append(f"{path.relative_to(PROJECT)}:{number}")
    return found


def rules_under_if() -> list[str]:
    """Rules indented below a top-level ``if``/``else`` in the rule files, as file:line."""
    found = []
    for path in sorted((PROJECT / "workflow" / "rules").glob("*.smk")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(r"\s+(rule|checkpoint) \w+:", line):
                found.append(f"{path.relative_to(PROJECT)}:{number}")
    return found


def long_functions(limit: int = 50) -> int:
    count = 0
    for path in [*PACKAGE.rglob("*.py"), *(PROJECT / "benchmarks").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                count += node.end_lineno - node.lineno + 1 > limit
    return count


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scope", action="append", default=[], help="a stage, e.g. measure (repeatable)")
    scopes = parser.parse_args(argv).scope or ["measure", "senses"]
    graph = import_graph()
    print("| scope | modules | top-level modules | import layers | imports between modules |")
    print("|---|---|---|---|---|")
    for prefix in ["contextuality", *(f"contextuality.{scope}" for scope in scopes)]:
        row = shape(graph, prefix)
        print(
            f"| {row['scope']} | {row['modules']} | {row['top-level modules']} | {row['import layers']} "
            f"| {row['imports between modules']} |"
        )
        for circle in row["circles"]:
            print(f"circle in {prefix}: {' <-> '.join(circle)}")
    branches = model_kind_branches()
    under_if = rules_under_if()
    common = (PROJECT / "workflow" / "rules" / "common.smk").read_text().count("\n")
    print(f"model-kind isinstance branches outside {ENCODER_MODULE}: {len(branches)} {' '.join(branches)}")
    print(f"rules defined under an if: {len(under_if)} {' '.join(under_if)}")
    print(f"common.smk: {common} lines")
    print(f"functions over 50 lines (src and benchmarks): {long_functions()}")


if __name__ == "__main__":
    main()
