"""docs/data-contract.md against the real outputs of the smoke run: every file it names exists, and its
columns, datasets, attributes or keys are exactly the ones the contract lists.

The contract's bullets name a file in backticks, then list its fields after ``Columns:``, ``Datasets:``,
``Attributes:`` or ``Keys:`` as backticked names (what a name means is in parentheses after it, and
is not a field). Path patterns: ``{model}`` a model key, ``{LL}`` a two-digit layer, ``{s}`` a shard.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import h5py
import pandas as pd
import pytest

from conftest import PROJECT

pytestmark = pytest.mark.slow

CONTRACT = PROJECT / "docs" / "data-contract.md"
KINDS = ("Columns", "Datasets", "Attributes", "Keys")


def _strip_parentheses(text: str) -> str:
    while True:
        stripped = re.sub(r"\([^()]*\)", "", text)
        if stripped == text:
            return text
        text = stripped


def contract() -> dict[str, dict[str, list[str]]]:
    """{path pattern: {kind: [field, ...]}} from the contract's bullets."""
    entries = {}
    for bullet in re.split(r"\n(?=- `)", CONTRACT.read_text()):
        head = re.match(r"- `([^`]+)`", bullet)
        if not head:
            continue
        fields = {}
        text = _strip_parentheses(bullet)
        for kind in KINDS:
            for listed in re.findall(rf"{kind}:(.*?)(?:\.(?:\s|$)|;|$)", text, flags=re.S):
                fields.setdefault(kind, []).extend(re.findall(r"`([^`]+)`", listed))
        if fields:
            entries[head.group(1)] = fields
    return entries


def named_paths() -> list[str]:
    """Every path pattern a bullet of the contract opens with, with or without a field list."""
    return re.findall(r"^- `([^`]+)`", CONTRACT.read_text(), flags=re.M)


def _files(workdir: Path, pattern: str) -> list[Path]:
    glob = re.sub(r"\{[^}]+\}", "*", pattern)
    return sorted(workdir.glob(glob))


def _actual(path: Path, kind: str) -> set[str]:
    if kind == "Columns":
        table = (
            pd.read_parquet(path)
            if path.suffix == ".parquet"
            else pd.read_csv(path, sep="\t" if path.suffix == ".tsv" else ",")
        )
        return set(table.columns)
    if kind == "Keys":
        return set(json.loads(path.read_text()))
    with h5py.File(path) as handle:
        return set(handle.keys()) if kind == "Datasets" else set(handle.attrs)


def _as_listed(name: str, listed: list[str]) -> str:
    """A field named per model (``row_{model}``) as the contract lists it, when ``name`` is one of those."""
    for pattern in listed:
        if "{model}" in pattern and re.fullmatch(re.escape(pattern).replace(r"\{model\}", ".+"), name):
            return pattern
    return name


@pytest.fixture(scope="module")
def runs(smoke_run, device_run) -> list[Path]:
    """The smoke run from the store, and the smoke config measured on the device (its files: device/)."""
    return [smoke_run, device_run]


def test_the_contract_lists_fields_for_every_output_format():
    entries = contract()
    assert len(entries) >= 15, sorted(entries)
    for pattern, fields in entries.items():
        assert all(fields.values()), pattern


def test_every_table_and_store_file_of_the_smoke_run_is_in_the_contract(runs):
    patterns = [re.sub(r"\{[^}]+\}", "*", pattern) for pattern in named_paths()]
    written = [
        path.relative_to(run)
        for run in runs
        for path in (run / "results").rglob("*")
        if path.suffix in {".h5", ".parquet", ".csv", ".json", ".tsv", ".tar"}
    ]
    assert written
    unnamed = [str(path) for path in written if not any(path.match(pattern) for pattern in patterns)]
    assert unnamed == [], f"files the run writes but docs/data-contract.md does not describe: {unnamed}"


@pytest.mark.parametrize("pattern", sorted(contract()))
def test_every_file_of_the_contract_has_exactly_its_fields(runs, pattern):
    smoke = next((run for run in runs if _files(run, pattern)), runs[0])  # device/ files: the device run's
    files = _files(smoke, pattern)
    assert files, f"the smoke run wrote no {pattern}"
    for kind, listed in contract()[pattern].items():
        expected = {re.sub(r"\{LL\}", "00", name) for name in listed}
        for path in files:
            actual = _actual(path, kind)
            if kind == "Datasets" and any("{LL}" in name for name in listed):  # one dataset per layer
                actual = {re.sub(r"^layer_\d+$", "layer_00", name) for name in actual}
            actual = {_as_listed(name, listed) for name in actual}
            assert actual == expected, (
                f"{path.relative_to(smoke)}: {kind.lower()} {sorted(actual ^ expected)} differ from the contract"
            )
