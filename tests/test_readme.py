"""The README as a front door: short, every relative link resolving in the repository, the own-model how-to
early, and its YAML valid against the schema."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from conftest import PROJECT
from contextuality.workflow.schema import load_settings

README = PROJECT / "README.md"
DOCS = [README, *sorted((PROJECT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    anchors = set()
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", line.lstrip("#").strip()).replace("`", "").lower()
            anchors.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return anchors


def test_the_readme_is_under_200_lines_and_says_how_to_run_your_own_hub_model_in_its_first_60():
    lines = README.read_text().splitlines()
    assert len(lines) < 200
    first = "\n".join(lines[:60])
    assert "## Your own model" in first and "source: hub" in first and "revision:" in first
    assert "40-character" in first


def test_every_relative_link_of_the_readme_and_the_docs_resolves_in_the_repository():
    broken = []
    for doc in DOCS:
        for target in LINK.findall(doc.read_text()):
            if re.match(r"[a-z]+://|mailto:", target):
                continue
            path, _, anchor = target.partition("#")
            resolved = (doc.parent / path).resolve() if path else doc
            if not resolved.exists():
                broken.append(f"{doc.name}: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                broken.append(f"{doc.name}: {target} (no such heading)")
    assert broken == []


def test_the_readmes_own_model_overlay_is_a_valid_config_merged_with_the_default():
    text = README.read_text()
    overlay = yaml.safe_load(re.search(r"```yaml\n(# mine\.yaml\n.*?)```", text, re.S).group(1))
    config = yaml.safe_load((PROJECT / "config" / "config.yaml").read_text())
    config["models"].update(overlay["models"])
    settings = load_settings(config)
    assert {"minilm", "smollm2", *overlay["models"]} == set(settings.models)
    assert re.fullmatch(r"[0-9a-f]{40}", settings.models["gpt2"].build.download.revision)


def test_the_readmes_corpus_examples_are_valid():
    block = re.search(r"## Your own sentences\n\n```yaml\n(.*?)```", README.read_text(), re.S).group(1)
    for line in block.splitlines():
        load_settings(
            {
                "models": {
                    "m": {
                        "source": "random",
                        "architecture": "bert",
                        "n_hidden_layers": 1,
                        "hidden_size": 8,
                        "vocab_size": 100,
                    }
                },
                **yaml.safe_load(line.split("  #")[0]),
            }
        )
