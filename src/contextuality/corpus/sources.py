"""Any corpus of sentences: a text file, a table, or a ``datasets`` dataset, into the STS corpus's sentence table.

``corpus.source``:

* ``text``: UTF-8, one sentence per line (a final newline or none; ``\\r\\n`` endings accepted);
* ``table``: CSV or Parquet (by suffix), a named text column (``corpus.text_column``) and optional id
  and group columns (``corpus.id_column``, ``corpus.group_column``);
* ``datasets``: a local dataset folder (``save_to_disk``'s, or data files ``datasets`` can load), or a
  hub id (``corpus.dataset``) at a pinned ``corpus.revision`` through the Hugging Face cache, with a
  named text column and ``corpus.split``.

Every source gets the STS corpus's cleaning (``sts.clean_sentence``), a running ``sentence_id`` in input
order (stable: the same input gives the same ids), its own id in ``source_id`` (the id column's value,
else ``line N`` or ``row N``) and its group in ``domain``. The STS-only columns hold neutral values
(``year`` 0, ``pair_id`` -1, ``side`` 0, ``score`` NaN). ``corpus_record`` records the source, the input's
sha256 and the counts. Malformed input stops the run with one line naming file:line (or the dataset and
row), what is allowed and how to recover.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from contextuality.core.settings import STS_SOURCES
from contextuality.corpus.sts import SENTENCE_COLUMNS, CorpusError, clean_sentence, hub_snapshot

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

SOURCES = (*STS_SOURCES, "text", "table", "datasets")
# The sentence table's columns for a corpus of any source: the STS columns, then each sentence's own id.
OTHER_COLUMNS = [*SENTENCE_COLUMNS, "source_id"]
RECOVER = "fix or remove that entry and rerun"
BYTE_ORDER_MARK = "\ufeff"


def is_sts(source: str) -> bool:
    """Whether the corpus is the STS sentences (pairs, gold scores and the paper's corpus)."""
    return source in STS_SOURCES


def settings_for_more_sentences(corpus) -> dict:
    """The corpus settings a message names as the way to more sentences: STS's years, or the file or dataset read."""
    if is_sts(corpus.source):
        return {"corpus.max_sentences": corpus.max_sentences, "corpus.years": list(corpus.years)}
    return {
        "corpus.path" if corpus.path else "corpus.dataset": corpus.path or corpus.dataset,
        "corpus.max_sentences": corpus.max_sentences,
    }


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def folder_files(folder: str | Path) -> list[Path]:
    """Every file of a folder, at any depth, in sorted order: what ``folder_sha256`` digests, and the corpus
    rule's inputs for a dataset folder (the folder's time does not change when a file inside is edited)."""
    return sorted(p for p in Path(folder).rglob("*") if p.is_file())


def folder_sha256(folder: Path) -> str:
    """One digest over every file of a folder: relative paths and contents, in sorted order."""
    digest = hashlib.sha256()
    for path in folder_files(folder):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + file_sha256(path).encode() + b"\0")
    return digest.hexdigest()


def read_text(path: Path) -> pd.DataFrame:
    """``text``, ``source_id`` ("line N") and ``group`` ("") of a UTF-8 file, one sentence per line."""
    import pandas as pd

    data = Path(path).read_bytes()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the final newline ends the last line; it starts none
    texts = []
    for number, raw in enumerate(lines, start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise CorpusError(f"{path}:{number}: not UTF-8 (byte {err.start + 1} of the line); allowed: UTF-8 text, one "
                              f"sentence per line; re-encode the file as UTF-8") from None  # fmt: skip
        texts.append(text[:-1] if text.endswith("\r") else text)
    if not texts:
        raise CorpusError(f"{path}: holds no line; allowed: one sentence per line; point corpus.path at the corpus")
    return pd.DataFrame({"text": texts, "source_id": [f"line {n}" for n in range(1, len(texts) + 1)], "group": ""})


def read_delimited(path: Path, separator: str) -> pd.DataFrame:
    """A CSV or TSV file as strings, every row checked to have one field per column of its header.

    pandas takes a first data row with one field more than the header as an index column (the text column
    then holds the label) and fills a short row with empty fields, silently; the standard ``csv`` reader
    gives each record's fields as written, and its line (``where``: file:line, the header being line 1).
    """
    import pandas as pd

    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark is no part of the first column's name
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise CorpusError(f"{path}:{line}: not UTF-8; allowed: a UTF-8 file; re-encode it as UTF-8") from None
    name = "TSV" if separator == "\t" else "CSV"
    csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))  # a long paragraph is one field (pandas had no limit)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=separator, strict=True)
    header, header_line, rows, where, end = None, 0, [], [], 0
    try:
        for record in reader:
            start, end = end + 1, reader.line_num
            if not record:
                continue  # a blank line (pandas skipped them too)
            if header is None:
                header, header_line = record, start
                continue
            if len(record) != len(header):
                fields = f"{len(record)} field{'s' if len(record) != 1 else ''}"
                columns = ", ".join(repr(column) for column in header)
                raise CorpusError(
                    f"{path}:{start}: {fields}, but the header (line {header_line}) has {len(header)} ({columns}); "
                    f"allowed: one field per column in every row: quote a field that holds {separator!r} "
                    '("..."), and remove separators at the ends of lines; fix that line'
                )
            rows.append(record)
            where.append(f"{path}:{start}")
    except csv.Error as err:
        raise CorpusError(f"{path}:{reader.line_num}: {err}; allowed: a {name} file with balanced quotes; fix that "
                          "line") from None  # fmt: skip
    if header is None:
        raise CorpusError(f"{path}: holds no header line; allowed: a {name} file whose first line names its columns; "
                          "point corpus.path at the corpus")  # fmt: skip
    repeated = sorted({column for column in header if header.count(column) > 1})
    if repeated:
        raise CorpusError(f"{path}:{header_line}: the header names column {repeated[0]!r} more than once; allowed: "
                          "one column per name; rename it")  # fmt: skip
    frame = pd.DataFrame(rows, columns=header, dtype=str)
    frame.attrs["where"] = where
    return frame


def read_table(path: Path, text_column: str, id_column: str | None, group_column: str | None) -> pd.DataFrame:
    """``text``, ``source_id`` and ``group`` of a CSV, TSV or Parquet table (``where`` of each row: file:line)."""
    import pandas as pd
    import pyarrow

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        try:
            frame = pd.read_parquet(path)
        except (pyarrow.ArrowException, OSError) as err:
            reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise CorpusError(f"{path}: not a readable Parquet file ({reason}); allowed: a Parquet table; it is damaged "
                              "or truncated: replace it with an intact copy") from None  # fmt: skip
        where = [f"{path} row {i + 1}" for i in range(len(frame))]
    elif suffix in (".csv", ".tsv"):
        frame = read_delimited(path, "\t" if suffix == ".tsv" else ",")
        where = frame.attrs["where"]
    else:
        raise CorpusError(
            f"{path}: corpus.source 'table' reads .csv, .tsv or .parquet files, not {suffix or 'no suffix'!r}"
        )
    for key, column in (("text_column", text_column), ("id_column", id_column), ("group_column", group_column)):
        if column is not None and column not in frame.columns:
            raise CorpusError(f"{path}: no column {column!r} (corpus.{key}); the table has {list(frame.columns)}; "
                              f"set corpus.{key} to one of them")  # fmt: skip
    texts = frame[text_column]
    for i, value in enumerate(texts):
        if not isinstance(value, str):
            raise CorpusError(f"{where[i]}: {text_column!r} is {value!r}, not text; allowed: a "
                              f"sentence in every row; {RECOVER}")  # fmt: skip
    ids = frame[id_column].astype(str) if id_column else pd.Series([f"row {i + 1}" for i in range(len(frame))])
    if id_column:
        duplicated = ids.duplicated()
        if duplicated.any():
            i = int(duplicated.to_numpy().nonzero()[0][0])
            raise CorpusError(f"{where[i]}: id {ids.iloc[i]!r} ({id_column!r}) appears again; allowed: "
                              f"one row per id; {RECOVER}")  # fmt: skip
    groups = frame[group_column].astype(str) if group_column else ""
    table = pd.DataFrame({"text": texts.to_numpy(), "source_id": ids.to_numpy(), "group": groups})
    table.attrs["where"] = where
    return table


def read_dataset(path: str | None, dataset: str | None, revision: str | None, split: str | None, text_column: str,
                 id_column: str | None, group_column: str | None) -> tuple[pd.DataFrame, Path, str | None]:  # fmt: skip
    """``text``, ``source_id`` and ``group`` of one split of a dataset folder or of a hub dataset at a pinned
    revision (from the Hugging Face cache), the folder read and the split read (``split``, by default
    ``train``; a single saved ``Dataset``'s own, which may be None)."""
    import datasets
    import pandas as pd
    import pyarrow

    if dataset is not None:
        if not revision:
            raise CorpusError(f"corpus.dataset {dataset!r} needs corpus.revision (a commit); a hub dataset is read "
                              "only at a pinned revision, so that a rerun reads the same sentences")  # fmt: skip
        try:
            folder = hub_snapshot(dataset, revision)
        except Exception as err:  # the hub raises many types (connection, offline mode, missing cache)
            reason = (str(err).strip().splitlines() or [""])[0]
            raise CorpusError(f"corpus.dataset {dataset!r} at revision {revision}: {type(err).__name__}: "
                              f"{reason.rstrip('.')}; without network, fill the Hugging Face cache on a machine that "
                              f"can reach the hub (hf download {dataset} --repo-type dataset --revision {revision}) "
                              "or give corpus.path a local dataset folder") from err  # fmt: skip
        name = f"{dataset}@{revision}"
    else:
        folder, name = Path(path), str(path)
        if not folder.is_dir():
            raise CorpusError(f"corpus.path {path!r}: no such folder; corpus.source 'datasets' reads a local dataset "
                              "folder (or set corpus.dataset and corpus.revision for a hub dataset)")  # fmt: skip
    data_files: list[str] = []
    try:
        if (
            (folder / "dataset_dict.json").is_file()
            or (folder / "dataset_info.json").is_file()
            and (folder / "state.json").is_file()
        ):
            loaded = datasets.load_from_disk(str(folder))
            if isinstance(loaded, datasets.DatasetDict):
                split = split or "train"
                loaded = loaded[split]
            else:
                split = _single_dataset_split(loaded, split, name)
        else:
            split = split or "train"
            with tempfile.TemporaryDirectory(prefix="hf-datasets-") as cache:
                builder = datasets.load_dataset_builder(str(folder), cache_dir=cache)
                data_files = [str(file) for files in (builder.config.data_files or {}).values() for file in files]
                check_data_files(folder, data_files, name, linked_ok=dataset is not None)
                builder.download_and_prepare()
                loaded = builder.as_dataset(split=split)
    except CorpusError:
        raise
    except KeyError:
        raise CorpusError(f"{name}: no split {split!r}; set corpus.split to one of its splits") from None
    except (datasets.exceptions.DatasetGenerationError, pyarrow.ArrowException) as err:
        raise CorpusError(_unreadable(name, split, data_files, err)) from None
    except (ValueError, FileNotFoundError) as err:
        reason = (str(err).strip().splitlines() or [""])[0]
        raise CorpusError(
            f"{name}: cannot load split {split!r}: {reason}; set corpus.split, or check the folder"
        ) from None
    for key, column in (("text_column", text_column), ("id_column", id_column), ("group_column", group_column)):
        if column is not None and column not in loaded.column_names:
            raise CorpusError(f"{name} (split {split!r}): no column {column!r} (corpus.{key}); it has "
                              f"{loaded.column_names}; set corpus.{key} to one of them")  # fmt: skip
    columns = [c for c in (text_column, id_column, group_column) if c]
    frame = loaded.select_columns(list(dict.fromkeys(columns))).to_pandas()
    where = [f"{name} {split}[{i}]" for i in range(len(frame))]
    for i, value in enumerate(frame[text_column]):
        if not isinstance(value, str):
            raise CorpusError(f"{where[i]}: {text_column!r} is {value!r}, not text; allowed: a sentence in every row; "
                              f"{RECOVER}")  # fmt: skip
    ids = frame[id_column].astype(str) if id_column else pd.Series([f"row {i}" for i in range(len(frame))])
    if id_column and ids.duplicated().any():
        i = int(ids.duplicated().to_numpy().nonzero()[0][0])
        raise CorpusError(
            f"{where[i]}: id {ids.iloc[i]!r} ({id_column!r}) appears again; allowed: one row per id; {RECOVER}"
        )
    table = pd.DataFrame({"text": frame[text_column].to_numpy(), "source_id": ids.to_numpy(),
                          "group": frame[group_column].astype(str).to_numpy() if group_column else ""})  # fmt: skip
    table.attrs["where"] = where
    return table, folder, split


def _single_dataset_split(loaded, split: str | None, name: str) -> str | None:
    """The split of a single saved ``Dataset`` (not a ``DatasetDict``): its own, which ``corpus.split`` may only name."""
    own = str(loaded.split) if loaded.split is not None else None
    if split is not None and split != own:
        recorded = f"split {own!r}" if own else "no split recorded"
        raise CorpusError(f"{name}: a single saved Dataset ({recorded}), not a DatasetDict, so corpus.split {split!r} "
                          "selects nothing; leave corpus.split unset to read the Dataset, or save a DatasetDict that "
                          "holds that split")  # fmt: skip
    return own


def check_data_files(folder: Path, data_files: list[str], name: str, *, linked_ok: bool) -> None:
    """Refuse data files outside the dataset folder (a card's ``configs: data_files`` may name any path), links out
    of it (a local folder; a hub snapshot's files are links to the cache's blobs), and a folder of several formats
    of which ``datasets`` would read one (it takes the most common file extension and drops the rest)."""
    import datasets.data_files
    from datasets.load import infer_module_for_data_files_list

    root = Path(os.path.abspath(folder))
    card = root / "README.md"
    for file in data_files:
        if "://" in file or not Path(os.path.normpath(file)).is_relative_to(root):
            raise CorpusError(f"{card}: its data_files name {file}, outside the dataset folder {root}; allowed: files "
                              "inside the folder; copy the file into the folder and name it relative to the "
                              "folder")  # fmt: skip
        if not linked_ok and not Path(os.path.realpath(file)).is_relative_to(os.path.realpath(root)):
            raise CorpusError(f"{file} is a symbolic link to {os.path.realpath(file)}, outside the dataset folder "
                              f"{root}; allowed: files inside the folder; copy that file into the folder instead of "
                              "linking it")  # fmt: skip
    if _card_configs(card):
        return  # the card names the files to read
    patterns = datasets.data_files.get_data_patterns(str(root))
    found = datasets.data_files.DataFilesDict.from_patterns(patterns, str(root))
    formats: dict[str, list[str]] = {}
    for file in sorted({str(file) for files in found.values() for file in files}):
        module, _ = infer_module_for_data_files_list(datasets.data_files.DataFilesList([file], [None]))
        if module:
            formats.setdefault(module, []).append(os.path.relpath(file, root))
    if len(formats) > 1:
        chosen, _ = infer_module_for_data_files_list(
            datasets.data_files.DataFilesList(data_files, [None] * len(data_files))
        )
        listed = "; ".join(f"{module}: {', '.join(files)}" for module, files in sorted(formats.items()))
        raise CorpusError(f"{name}: holds data files of {len(formats)} formats ({listed}), and datasets would read only "
                          f"the {chosen} ones; allowed: one format per folder (or a README.md whose configs name the "
                          "files to read); move the others out")  # fmt: skip


def _card_configs(card: Path) -> list:
    """The ``configs`` a dataset card's YAML header declares ([] without a card or configs)."""
    if not card.is_file():
        return []
    from huggingface_hub import DatasetCard

    return DatasetCard.load(card).data.get("configs") or []


def _unreadable(name: str, split: str | None, data_files: list[str], err: Exception) -> str:
    """One line for a dataset ``datasets`` could not read: the JSON lines file and line at fault where there is one."""
    for file in data_files:
        if file.endswith(".jsonl") and Path(file).is_file():
            with open(file, encoding="utf-8", errors="replace") as handle:
                for number, line in enumerate(handle, start=1):
                    try:
                        value = json.loads(line) if line.strip() else {}
                    except ValueError as bad:
                        value = bad
                    if not isinstance(value, dict):
                        reason = value if isinstance(value, ValueError) else f"a JSON {type(value).__name__}"
                        return (f"{file}:{number}: not a JSON object ({reason}); allowed: one JSON object per line; "
                                f"{RECOVER}")  # fmt: skip
    cause = err
    while cause.__cause__ is not None or cause.__context__ is not None:
        cause = cause.__cause__ or cause.__context__
    reason = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
    return (
        f"{name}: datasets cannot read split {split!r} ({type(cause).__name__}: {reason}); allowed: data files "
        "datasets can parse, or a folder save_to_disk wrote; it is damaged or malformed: replace or fix the file"
    )


def to_sentences(table: pd.DataFrame, source: str, where_prefix: str, max_sentences: int | None) -> pd.DataFrame:
    """The sentence table (``OTHER_COLUMNS``) of a source's rows, cleaned; an empty sentence is refused."""
    import numpy as np
    import pandas as pd

    where = table.attrs.get("where") or [f"{where_prefix}:{sid.split()[-1]}" for sid in table["source_id"]]
    # a byte-order mark opens a file, or each file of several joined (cat a.txt b.txt): no part of the first word
    texts = [clean_sentence(t.lstrip(BYTE_ORDER_MARK)) for t in table["text"]]
    for i, text in enumerate(texts):
        if BYTE_ORDER_MARK in text:
            raise CorpusError(f"{where[i]}: a byte-order mark (U+FEFF) inside the sentence (files joined where one "
                              "lacked its final newline?); allowed: one at the start of a line, where it is dropped; "
                              f"{RECOVER}")  # fmt: skip
        if not text:
            raise CorpusError(f"{where[i]}: empty sentence (after removing '\"' and outer whitespace); allowed: one "
                              f"non-empty sentence per entry; {RECOVER}")  # fmt: skip
        if "\n" in text or "\r" in text:
            raise CorpusError(
                f"{where[i]}: the sentence spans several lines; allowed: one line per sentence; {RECOVER}"
            )
    n = len(texts) if max_sentences is None else min(max_sentences, len(texts))
    sentences = pd.DataFrame({
        "sentence_id": np.arange(n, dtype=np.int64), "year": np.zeros(n, np.int32), "split": source,
        "domain": table["group"].to_numpy()[:n] if n else [], "pair_id": np.full(n, -1, np.int32),
        "side": np.zeros(n, np.int8), "score": np.full(n, np.nan), "text": texts[:n],
        "source_id": table["source_id"].to_numpy()[:n] if n else [],
    })  # fmt: skip
    return sentences[OTHER_COLUMNS]


def load_source(corpus) -> tuple[pd.DataFrame, dict]:
    """The sentence table of a non-STS ``corpus`` (``core.settings.CorpusSettings``) and its record."""
    source, split = corpus.source, None
    if source == "text":
        path = Path(corpus.path)
        table, digest, where_prefix = read_text(path), file_sha256(path), str(path)
    elif source == "table":
        path = Path(corpus.path)
        table = read_table(path, corpus.text_column, corpus.id_column, corpus.group_column)
        digest, where_prefix = file_sha256(path), str(path)
    elif source == "datasets":
        table, folder, split = read_dataset(corpus.path, corpus.dataset, corpus.revision, corpus.split,
                                            corpus.text_column, corpus.id_column, corpus.group_column)  # fmt: skip
        digest, where_prefix = folder_sha256(folder), str(folder)
    else:
        raise CorpusError(f"corpus.source is {source!r}; allowed: {', '.join(repr(s) for s in SOURCES)}")
    sentences = to_sentences(table, source, where_prefix, corpus.max_sentences)
    record = {
        "source": source, "path": corpus.path, "dataset": corpus.dataset, "revision": corpus.revision,
        "split": split if source == "datasets" else None, "text_column": corpus.text_column,
        "id_column": corpus.id_column, "group_column": corpus.group_column, "sha256": digest,
        "n_input": len(table), "n_sentences": len(sentences), "max_sentences": corpus.max_sentences,
    }  # fmt: skip
    log.info("corpus.source %s: %d sentences from %s (sha256 %s)", source, len(sentences), where_prefix, digest[:12])
    return sentences, record


def sts_record(
    source: str,
    sentences: pd.DataFrame,
    *,
    release_files: list[str] = (),
    years=(),
    include_2012_train: bool = False,
    hub_revisions: dict | None = None,
) -> dict:
    """``corpus.json`` of an STS corpus: the sha256 of every release file read (bundled) or of every file of
    each pinned hub snapshot, and of the sentence texts in corpus order."""
    from contextuality.corpus.sts import HUB_DATASETS, selected_releases

    if source == "bundled":  # keyed {year}/{split}/{file}: the same record wherever corpus.bundled_dir lies
        files = {"/".join(Path(path).parts[-3:]): file_sha256(Path(path)) for path in release_files}
    else:
        files = {}
        for year in sorted({year for year, _ in selected_releases(list(years), include_2012_train)}):
            name, revision = HUB_DATASETS[year]
            revision = (hub_revisions or {}).get(year, revision)
            files[f"{name}@{revision}"] = folder_sha256(hub_snapshot(name, revision))
    texts = hashlib.sha256("\n".join(sentences["text"]).encode("utf-8")).hexdigest()
    return {"source": source, "files": files, "sentences_sha256": texts, "n_sentences": len(sentences)}
