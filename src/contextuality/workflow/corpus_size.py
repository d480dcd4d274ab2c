"""A corpus's sentences before any job, from the config's own input: counted cheaply (lines, rows, a Parquet
footer), or None where it cannot be known before the corpus job reads it (a hub corpus, a dataset folder).

Not the corpus job's table (``sentences.parquet``): it is the last run's, which may have read fewer sentences
(``corpus.max_sentences: 120``) or another file; an estimate from it let a run 200 times larger through."""

from __future__ import annotations

import json
from pathlib import Path

from contextuality.core import layout
from contextuality.core.settings import CorpusSettings

# The corpus record's keys a 'datasets' corpus must share with the config for its count to be this corpus's
_DATASET_KEYS = ("source", "path", "dataset", "revision", "text_column", "id_column", "group_column")
# The scored pairs of each bundled STS release (its gold files' lines, resources/sts), for a bundled_dir not there yet
STS_SCORED_PAIRS = {(2012, "test"): 3108, (2012, "train"): 2234, (2013, "test"): 1500, (2014, "test"): 3750,
                    (2015, "test"): 3000, (2016, "test"): 1186}  # fmt: skip


def corpus_sentences(corpus: CorpusSettings) -> int | None:
    """The sentences the corpus job will read of ``corpus`` (after ``corpus.max_sentences``), or None if unknown."""
    n = input_sentences(corpus)
    if n is None and corpus.source == "datasets":
        n = _recorded_inputs(corpus)
    if n is not None and corpus.max_sentences is not None:
        n = min(n, corpus.max_sentences)
    return n


def input_sentences(corpus: CorpusSettings) -> int | None:
    """Entries of the configured input: a bundled STS release's scored pairs x 2 (the gold files' lines), a text
    file's non-blank lines, a table's records (its header aside; a Parquet file's footer); None for a hub corpus,
    a dataset folder or a file that is not there (the corpus job says what is wrong with it)."""
    if corpus.source == "bundled":
        from contextuality.corpus.sts import bundled_release_paths, selected_releases

        years, train = list(corpus.years), corpus.include_2012_train
        gold = [Path(p) for p in bundled_release_paths(Path(corpus.bundled_dir), years, train)[1::2]]
        if all(path.is_file() for path in gold):
            return 2 * sum(_nonblank_lines(path.read_bytes()) for path in gold)
        return 2 * sum(STS_SCORED_PAIRS[release] for release in selected_releases(years, train))
    if corpus.path is None or not Path(corpus.path).is_file():
        return None
    path = Path(corpus.path)
    if corpus.source == "text":
        return _nonblank_lines(path.read_bytes())
    if corpus.source == "table":
        return _table_rows(path)
    return None


def _nonblank_lines(data: bytes) -> int:
    return sum(1 for line in data.split(b"\n") if line.strip())


def _table_rows(path: Path) -> int | None:
    """A table's records: a Parquet file's footer; a CSV or TSV file's non-blank records less its header (read with
    the ``csv`` reader only when a quote may join lines)."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.read_metadata(path).num_rows
        except Exception:  # noqa: BLE001 - a damaged file: the corpus job names it
            return None
    if suffix not in (".csv", ".tsv"):
        return None
    data = path.read_bytes()
    if b'"' not in data:
        return max(_nonblank_lines(data) - 1, 0)
    import csv
    import io

    csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))
    text = io.StringIO(data.decode("utf-8-sig", errors="replace"), newline="")
    try:
        records = sum(1 for record in csv.reader(text, delimiter="\t" if suffix == ".tsv" else ",") if record)
    except csv.Error:
        return None
    return max(records - 1, 0)


def _recorded_inputs(corpus: CorpusSettings) -> int | None:
    """A 'datasets' corpus's entries as its corpus job recorded them (``corpus.json``'s ``n_input``), when that job
    read the corpus the config names (the same folder or hub dataset, revision, split and columns)."""
    record_path = Path(layout.path(layout.CORPUS_RECORD, corpus=corpus.name))
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError):
        return None
    same = all(record.get(key) == getattr(corpus, key) for key in _DATASET_KEYS)
    split = corpus.split is None or record.get("split") == corpus.split
    return int(record["n_input"]) if same and split and isinstance(record.get("n_input"), int) else None


def words_per_sentence(corpus: CorpusSettings) -> float | None:
    """A text corpus's whitespace-separated words a sentence, over the sentences the corpus job will read (its
    first ``corpus.max_sentences`` non-blank lines); None for any other source, or a file that is not there."""
    if corpus.source != "text" or corpus.path is None or not Path(corpus.path).is_file():
        return None
    lines = [line for line in Path(corpus.path).read_bytes().split(b"\n") if line.strip()][: corpus.max_sentences]
    return sum(len(line.split()) for line in lines) / len(lines) if lines else None
