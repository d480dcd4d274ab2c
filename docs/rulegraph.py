"""The rule graph of docs/architecture.md: the smoke run's (random models, so every layer file is known before any build),
with the download that a packaged, hub, folder or ELMo model adds, taken from the default run's graph.

    snakemake --rulegraph > /tmp/default.dot
    snakemake --rulegraph --configfile config/smoke.yaml > /tmp/smoke.dot
    python docs/rulegraph.py /tmp/default.dot /tmp/smoke.dot | dot -Tpng -Gdpi=100 -o docs/figures/rulegraph.png

(``dot`` is Graphviz: ``apt-get install graphviz``.) The default run's own graph cannot show the per-layer
rules: its models' layer counts are known only once they are built.
"""

from __future__ import annotations

import re
import sys


def rule_graph(path: str) -> tuple[list[str], set[tuple[str, str]]]:
    """The rules of a ``snakemake --rulegraph`` file, in its order, and its edges by rule name."""
    text = open(path, encoding="utf-8").read()
    nodes = dict(re.findall(r'^\s*(\d+)\[label = "([^"]+)"', text, re.M))
    edges = {(nodes[a], nodes[b]) for a, b in re.findall(r"^\s*(\d+) -> (\d+)", text, re.M)}
    return list(nodes.values()), edges


def main(default_dot: str, smoke_dot: str) -> None:
    default_rules, default_edges = rule_graph(default_dot)
    rules, edges = rule_graph(smoke_dot)
    rules += [rule for rule in default_rules if rule not in rules]
    edges |= {edge for edge in default_edges if "download_model" in edge}
    ids = {rule: number for number, rule in enumerate(rules)}
    print("digraph snakemake_rules {")
    print("    graph[bgcolor=white, margin=0];")
    print('    node[shape=box, style=rounded, fontname=sans, fontsize=10, penwidth=2, color="0.6 0.5 0.7"];')
    print("    edge[penwidth=2, color=grey];")
    for rule in rules:
        print(f'    {ids[rule]}[label = "{rule}"];')
    for a, b in sorted(edges, key=lambda edge: (ids[edge[0]], ids[edge[1]])):
        print(f"    {ids[a]} -> {ids[b]}")
    print("}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
