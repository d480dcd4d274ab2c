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

import hashlib
import logging
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from contextuality.corpus.sts import SENTENCE_COLUMNS, CorpusError, clean_sentence, hub_snapshot

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

STS_SOURCES = ("bundled", "hub")
SOURCES = (*STS_SOURCES, "text", "table", "datasets")
# The sentence table's columns for a corpus of any source: the STS columns, then each sentence's own id.
OTHER_COLUMNS = [*SENTENCE_COLUMNS, "source_id"]
RECOVER = "fix or remove that entry and rerun"


def is_sts(source: str) -> bool:
    """Whether the corpus is the STS sentences (pairs, gold scores and the paper's corpus)."""
    return source in STS_SOURCES


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def folder_sha256(folder: Path) -> str:
    """One digest over every file of a folder: relative paths and contents, in sorted order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
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


def read_table(path: Path, text_column: str, id_column: str | None, group_column: str | None) -> pd.DataFrame:
    """``text``, ``source_id`` and ``group`` of a CSV or Parquet table (``where`` of each row: file:line)."""
    import pandas as pd

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        frame = pd.read_parquet(path)
        where = [f"{path} row {i + 1}" for i in range(len(frame))]
    elif suffix in (".csv", ".tsv"):
        try:
            frame = pd.read_csv(path, sep="\t" if suffix == ".tsv" else ",", dtype=str, keep_default_na=False,
                                encoding="utf-8")  # fmt: skip
        except UnicodeDecodeError:
            raise CorpusError(f"{path}: not UTF-8; allowed: a UTF-8 CSV file; re-encode it as UTF-8") from None
        except pd.errors.ParserError as err:
            raise CorpusError(f"{path}: {str(err).strip()}; allowed: a CSV file with a header line; fix that line") from None
        where = [f"{path}:{i + 2}" for i in range(len(frame))]  # the header is line 1
    else:
        raise CorpusError(f"{path}: corpus.source 'table' reads .csv, .tsv or .parquet files, not {suffix or 'no suffix'!r}")
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


def read_dataset(path: str | None, dataset: str | None, revision: str | None, split: str, text_column: str,
                 id_column: str | None, group_column: str | None) -> tuple[pd.DataFrame, Path]:  # fmt: skip
    """``text``, ``source_id`` and ``group`` of one split of a dataset folder or of a hub dataset at a pinned
    revision (from the Hugging Face cache), and the folder read."""
    import datasets
    import pandas as pd

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
                              "or give corpus.path a local dataset folder")  # fmt: skip
        name = f"{dataset}@{revision}"
    else:
        folder, name = Path(path), str(path)
        if not folder.is_dir():
            raise CorpusError(f"corpus.path {path!r}: no such folder; corpus.source 'datasets' reads a local dataset "
                              "folder (or set corpus.dataset and corpus.revision for a hub dataset)")  # fmt: skip
    try:
        if (folder / "dataset_dict.json").is_file() or (folder / "dataset_info.json").is_file() and (folder / "state.json").is_file():
            loaded = datasets.load_from_disk(str(folder))
            loaded = loaded[split] if isinstance(loaded, datasets.DatasetDict) else loaded
        else:
            with tempfile.TemporaryDirectory(prefix="hf-datasets-") as cache:
                loaded = datasets.load_dataset(str(folder), split=split, cache_dir=cache)
    except KeyError:
        raise CorpusError(f"{name}: no split {split!r}; set corpus.split to one of its splits") from None
    except (ValueError, FileNotFoundError) as err:
        reason = (str(err).strip().splitlines() or [""])[0]
        raise CorpusError(f"{name}: cannot load split {split!r}: {reason}; set corpus.split, or check the folder") from None
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
        raise CorpusError(f"{where[i]}: id {ids.iloc[i]!r} ({id_column!r}) appears again; allowed: one row per id; {RECOVER}")
    table = pd.DataFrame({"text": frame[text_column].to_numpy(), "source_id": ids.to_numpy(),
                          "group": frame[group_column].astype(str).to_numpy() if group_column else ""})  # fmt: skip
    table.attrs["where"] = where
    return table, folder


def to_sentences(table: pd.DataFrame, source: str, where_prefix: str, max_sentences: int | None) -> pd.DataFrame:
    """The sentence table (``OTHER_COLUMNS``) of a source's rows, cleaned; an empty sentence is refused."""
    import numpy as np
    import pandas as pd

    where = table.attrs.get("where") or [f"{where_prefix}:{sid.split()[-1]}" for sid in table["source_id"]]
    texts = [clean_sentence(t) for t in table["text"]]
    for i, text in enumerate(texts):
        if not text:
            raise CorpusError(f"{where[i]}: empty sentence (after removing '\"' and outer whitespace); allowed: one "
                              f"non-empty sentence per entry; {RECOVER}")  # fmt: skip
        if "\n" in text or "\r" in text:
            raise CorpusError(f"{where[i]}: the sentence spans several lines; allowed: one line per sentence; {RECOVER}")
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
    source = corpus.source
    if source == "text":
        path = Path(corpus.path)
        table, digest, where_prefix = read_text(path), file_sha256(path), str(path)
    elif source == "table":
        path = Path(corpus.path)
        table = read_table(path, corpus.text_column, corpus.id_column, corpus.group_column)
        digest, where_prefix = file_sha256(path), str(path)
    elif source == "datasets":
        table, folder = read_dataset(corpus.path, corpus.dataset, corpus.revision, corpus.split, corpus.text_column,
                                     corpus.id_column, corpus.group_column)  # fmt: skip
        digest, where_prefix = folder_sha256(folder), str(folder)
    else:
        raise CorpusError(f"corpus.source is {source!r}; allowed: {', '.join(repr(s) for s in SOURCES)}")
    sentences = to_sentences(table, source, where_prefix, corpus.max_sentences)
    record = {
        "source": source, "path": corpus.path, "dataset": corpus.dataset, "revision": corpus.revision,
        "split": corpus.split if source == "datasets" else None, "text_column": corpus.text_column,
        "id_column": corpus.id_column, "group_column": corpus.group_column, "sha256": digest,
        "n_input": len(table), "n_sentences": len(sentences), "max_sentences": corpus.max_sentences,
    }  # fmt: skip
    log.info("corpus.source %s: %d sentences from %s (sha256 %s)", source, len(sentences), where_prefix, digest[:12])
    return sentences, record


def sts_record(source: str, sentences: pd.DataFrame, *, release_files: list[str] = (), years=(),
               include_2012_train: bool = False, hub_revisions: dict | None = None) -> dict:
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
