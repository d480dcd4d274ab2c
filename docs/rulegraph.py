"""The rule graph of the smoke run (random models: every layer file is known before the build), with the default run's download_model added."""
import re, sys
def parse(path):
    text = open(path).read()
    nodes = dict(re.findall(r'^\s*(\d+)\[label = "([^"]+)"', text, re.M))
    edges = {(nodes[a], nodes[b]) for a, b in re.findall(r"^\s*(\d+) -> (\d+)", text, re.M)}
    return list(nodes.values()), edges
order, edges = [], set()
for path in sys.argv[1:]:
    names, found = parse(path)
    order += [n for n in names if n not in order]
    edges |= found
# an edge implied through the other graph's missing rules (materialise_model -> static_scores stands for the
# per-layer chain when the layer count is unknown) is dropped when a longer path in the union explains it
def reachable(a, b, skip):
    stack, seen = [a], set()
    while stack:
        x = stack.pop()
        for (p, q) in edges:
            if p == x and (p, q) != skip and q not in seen:
                if q == b:
                    return True
                seen.add(q); stack.append(q)
    return False
# the smoke graph's edges are the real ones; the default graph adds the download of a packaged model
smoke_names, smoke_edges = parse(sys.argv[2])
edges = smoke_edges | {e for e in edges if "download_model" in e}
ids = {n: i for i, n in enumerate(order)}
print("digraph snakemake_rules {")
print('    graph[bgcolor=white, margin=0];')
print('    node[shape=box, style=rounded, fontname=sans, fontsize=10, penwidth=2, color="0.6 0.5 0.7"];')
print('    edge[penwidth=2, color=grey];')
for n in order:
    print(f'    {ids[n]}[label = "{n}"];')
for a, b in sorted(edges, key=lambda e: (ids[e[0]], ids[e[1]])):
    print(f"    {ids[a]} -> {ids[b]}")
print("}")
