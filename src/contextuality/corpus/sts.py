"""The STS 2012-2016 sentence corpus, built with the paper's rules (spec section 1.2).

Two sources feed the same sentence table:

* ``bundled``: the SemEval release files shipped in ``resources/sts/``. They are parsed strictly
  (every malformed line is an error naming the file and line), turned into one JSON-lines file of
  scored pairs, and loaded back through the ``datasets`` ``json`` builder.
* ``hub``: the MTEB copies ``mteb/sts12-sts`` ... ``mteb/sts16-sts`` at pinned revisions, through the
  Hugging Face cache (``HF_HOME``), so a cache holding those snapshots works offline.

Rules applied to both: scored pairs only, every ``"`` removed (many are unclosed), duplicates kept,
each pair contributes Sent1 then Sent2, and the order is stable (years ascending, sub-datasets in the
SentEval order, lines in file order). ``sentence_id`` is the running counter over that order.
"""

from __future__ import annotations

import codecs
import json
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas loads in about 0.9 s; the Snakefile imports this module at every start
    import pandas as pd

from contextuality.core.atomic import atomic_path

log = logging.getLogger(__name__)

# Sub-datasets per (year, split) in SentEval's order (facebookresearch/SentEval senteval/sts.py).
# 2013 SMT is listed so that its absence is reported: its input file is LDC-licensed and not shipped.
RELEASES: dict[tuple[int, str], list[str]] = {
    (2012, "test"): ["MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"],
    (2012, "train"): ["MSRpar", "MSRvid", "SMTeuroparl"],
    (2013, "test"): ["FNWN", "headlines", "OnWN", "SMT"],
    (2014, "test"): ["deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"],
    (2015, "test"): ["answers-forums", "answers-students", "belief", "headlines", "images"],
    (2016, "test"): ["answer-answer", "headlines", "plagiarism", "postediting", "question-question"],
}
NOT_REDISTRIBUTABLE = {(2013, "test", "SMT")}

# Every STS release scores a pair from 0 (unrelated) to 5 (equivalent); a score outside is not one of its scores.
GOLD_RANGE = (0.0, 5.0)

# Pinned revisions used by MTEB (spec section 9.2).
HUB_DATASETS: dict[int, tuple[str, str]] = {
    2012: ("mteb/sts12-sts", "a0d554a64d88156834ff5ae9920b964011b16384"),
    2013: ("mteb/sts13-sts", "7e90230a92c190f1bf69ae9002b8cea547a64cca"),
    2014: ("mteb/sts14-sts", "6031580fec1f6af667f0bd2da0a551cf4f0b2375"),
    2015: ("mteb/sts15-sts", "ae752c7c21bf194d8b67fd573edf7ae58183cbe3"),
    2016: ("mteb/sts16-sts", "4d8694f8f0e0100860b497b999b3dbed754a0513"),
}

SENTENCE_COLUMNS = ["sentence_id", "year", "split", "domain", "pair_id", "side", "score", "text"]


class CorpusError(ValueError):
    """A release file or corpus option is malformed; the message names the file and line."""


@dataclass(frozen=True)
class ReleaseFiles:
    year: int
    split: str
    domain: str
    input: Path
    gold: Path


def release_files(root: Path, year: int, split: str, domain: str) -> ReleaseFiles:
    """Paths of one sub-dataset; 2016 prefixes its file names with ``STS2016``."""
    prefix = "STS2016" if year == 2016 else "STS"
    folder = Path(root) / str(year) / split
    return ReleaseFiles(
        year, split, domain, folder / f"{prefix}.input.{domain}.txt", folder / f"{prefix}.gs.{domain}.txt"
    )


def _read_lines(path: Path) -> list[str]:
    """Read a release file as UTF-8 lines; a bad byte is reported with its line number.

    A byte-order mark at the start of the file (some editors write one) is not text: it is dropped,
    so that it does not become part of the first word.
    """
    lines = []
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if number == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8) :]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise CorpusError(
                    f"{path}:{number}: bytes that are not UTF-8 ({raw[err.start : err.end]!r}); "
                    "release files must be UTF-8 text"
                ) from None
            lines.append(text.rstrip("\r\n"))
    return lines


def read_release(files: ReleaseFiles) -> tuple[list[dict], dict[str, int]]:
    """Scored pairs of one sub-dataset, with counts of what was skipped.

    Input lines hold ``sent1<TAB>sent2``; 2016 adds two source-note columns (ignored, as the
    organisers asked). A blank gold line marks an unscored distractor pair (2015, 2016): skipped.
    """
    inputs = _read_lines(files.input)
    golds = _read_lines(files.gold)
    for path, lines in ((files.input, inputs), (files.gold, golds)):
        if not lines:
            raise CorpusError(
                f"{path}: empty release file (0 lines); expected one line per sentence pair: "
                "restore it from the release"
            )
    if len(inputs) != len(golds):
        raise CorpusError(
            f"{files.input}: {len(inputs)} lines but its gold file {files.gold} has {len(golds)}; "
            "the two must be line-aligned"
        )
    allowed_columns = 4 if files.year == 2016 else 2
    pairs, counts = [], {"lines": len(inputs), "unscored": 0, "empty_sentences": 0}
    for pair_id, (line, gold) in enumerate(zip(inputs, golds)):
        number = pair_id + 1
        columns = line.split("\t")
        if len(columns) < 2:
            raise CorpusError(f"{files.input}:{number}: no tab; expected 'sentence1<TAB>sentence2'")
        if len(columns) != allowed_columns:
            raise CorpusError(
                f"{files.input}:{number}: {len(columns)} tab-separated columns; "
                f"{files.year} release files have {allowed_columns}"
            )
        gold = gold.strip()
        if not gold:
            counts["unscored"] += 1
            continue
        score = _gold_score(files.gold, number, gold)
        sentences = [clean_sentence(text) for text in columns[:2]]
        counts["empty_sentences"] += sum(1 for text in sentences if not text)
        pairs.append(
            {
                "year": files.year,
                "split": files.split,
                "domain": files.domain,
                "pair_id": pair_id,
                "score": score,
                "sentence1": sentences[0],
                "sentence2": sentences[1],
            }
        )
    if not pairs:
        raise CorpusError(
            f"{files.gold}: no scored pair in its {len(golds)} lines (all blank); expected gold "
            f"scores from {GOLD_RANGE[0]:g} to {GOLD_RANGE[1]:g}: restore it from the release"
        )
    return pairs, counts


def _gold_score(path: Path, number: int, gold: str) -> float:
    """One gold line's score: a finite number within the releases' range, else an error naming the line."""
    lo, hi = GOLD_RANGE
    try:
        score = float(gold)
    except ValueError:
        raise CorpusError(f"{path}:{number}: gold score {gold!r} is not a number") from None
    if not lo <= score <= hi:  # also false for nan
        raise CorpusError(
            f"{path}:{number}: gold score {gold!r} is outside the STS range; allowed: a number from {lo:g} to {hi:g}"
        )
    return score


def clean_sentence(text: str) -> str:
    """The paper removed every ``"`` (many are unclosed); outer whitespace carries no token."""
    return text.replace('"', "").strip()


def selected_releases(years: list[int], include_2012_train: bool) -> list[tuple[int, str]]:
    chosen = [(year, "test") for year in sorted(years)]
    if include_2012_train and 2012 in years:
        chosen.insert(chosen.index((2012, "test")), (2012, "train"))
    return chosen


def bundled_release_paths(root: Path, years: list[int], include_2012_train: bool) -> list[str]:
    """Every file ``write_bundled_pairs`` reads for these years (the sts_pairs rule's inputs), in corpus order."""
    paths = []
    for year, split in selected_releases(years, include_2012_train):
        for domain in RELEASES[(year, split)]:
            if (year, split, domain) not in NOT_REDISTRIBUTABLE:
                files = release_files(root, year, split, domain)
                paths += [str(files.input), str(files.gold)]
    return paths


def _existing_release_files(root: Path, year: int, split: str, domain: str) -> ReleaseFiles:
    files = release_files(root, year, split, domain)
    for path in (files.input, files.gold):
        if not path.is_file():
            raise CorpusError(f"{path}: release file not found (expected for STS{year} {split} {domain})")
    return files


def check_bundled_release_files(root: Path, years: list[int], include_2012_train: bool) -> int:
    """Parse every selected release file as ``write_bundled_pairs`` does, writing and logging nothing.

    Raises CorpusError at the first problem (``FILE:LINE: what is wrong; what is expected``); returns
    the number of scored pairs. Fast enough to run when the workflow is parsed (all five years: 0.1 s).
    """
    n_pairs = 0
    for year, split in selected_releases(years, include_2012_train):
        for domain in RELEASES[(year, split)]:
            if (year, split, domain) not in NOT_REDISTRIBUTABLE:
                n_pairs += len(read_release(_existing_release_files(root, year, split, domain))[0])
    return n_pairs


def write_bundled_pairs(root: Path, years: list[int], include_2012_train: bool, out_jsonl: Path) -> dict:
    """Parse the bundled release files into one JSON-lines file of scored pairs (corpus order)."""
    summary = {}
    with atomic_path(out_jsonl) as tmp, open(tmp, "w", encoding="utf-8") as out:
        for year, split in selected_releases(years, include_2012_train):
            for domain in RELEASES[(year, split)]:
                if (year, split, domain) in NOT_REDISTRIBUTABLE:
                    log.warning(
                        "skipping STS%d %s %s: its sentences are not redistributable (LDC licence); "
                        "only the gold file exists",
                        year,
                        split,
                        domain,
                    )
                    continue
                pairs, counts = read_release(_existing_release_files(root, year, split, domain))
                for pair in pairs:
                    out.write(json.dumps(pair, ensure_ascii=False) + "\n")
                summary[f"{year}/{split}/{domain}"] = {"scored_pairs": len(pairs), **counts}
                log.info(
                    "STS%d %-5s %-18s %5d lines, %5d scored pairs, %4d unscored skipped, %d empty sentences kept",
                    year,
                    split,
                    domain,
                    counts["lines"],
                    len(pairs),
                    counts["unscored"],
                    counts["empty_sentences"],
                )
    return summary


def load_pairs_bundled(pairs_jsonl: Path) -> pd.DataFrame:
    """Load the pairs file through the ``datasets`` json builder (cache kept out of the outputs)."""
    import datasets

    features = datasets.Features(
        {
            "year": datasets.Value("int32"),
            "split": datasets.Value("string"),
            "domain": datasets.Value("string"),
            "pair_id": datasets.Value("int32"),
            "score": datasets.Value("float64"),
            "sentence1": datasets.Value("string"),
            "sentence2": datasets.Value("string"),
        }
    )
    with tempfile.TemporaryDirectory(prefix="hf-datasets-") as cache:
        dataset = datasets.load_dataset(
            "json", data_files=str(pairs_jsonl), split="train", features=features, cache_dir=cache
        )
        return dataset.to_pandas()


def hub_snapshot(name: str, revision: str) -> Path:
    """The files of a hub dataset repository at ``revision``, through the Hugging Face cache.

    ``snapshot_download`` reads and fills the cache (``HF_HUB_CACHE``, by default ``$HF_HOME/hub``):
    online it downloads what the cache lacks; offline (``HF_HUB_OFFLINE=1``) it returns the cached
    snapshot of that commit, or raises. ``datasets.load_dataset(name, revision=...)`` is not used: with
    ``HF_HUB_OFFLINE=1`` (datasets 5.2) it raises before looking at this cache and falls back to its own
    Arrow cache (``$HF_HOME/datasets``), where it takes the most recently written copy of ``name``
    whatever its revision, so a pinned revision could be silently replaced by another one.
    """
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(name, repo_type="dataset", revision=revision))


def load_pairs_hub(years: list[int], include_2012_train: bool, revisions: dict[int, str] | None = None) -> pd.DataFrame:
    """Scored pairs from the pinned MTEB copies on the Hugging Face hub (needs network or the cached snapshots).

    Each repository's snapshot is loaded by the ``datasets`` loader for a local folder, which reads its
    data files (``test.jsonl.gz``, ``train.jsonl.gz``) and splits as it would on the hub.
    """
    import datasets
    import pandas as pd
    from huggingface_hub import constants

    frames = []
    for year, split in selected_releases(years, include_2012_train):
        name, revision = HUB_DATASETS[year]
        revision = (revisions or {}).get(year, revision)
        try:
            folder = hub_snapshot(name, revision)
            with tempfile.TemporaryDirectory(prefix="hf-datasets-") as cache:
                frame = datasets.load_dataset(str(folder), split=split, cache_dir=cache).to_pandas()
        except Exception as err:  # the hub raises many types (connection, offline mode, missing cache)
            reason = (str(err).strip().splitlines() or [""])[0]
            raise CorpusError(
                f"corpus.source 'hub': could not load {name} (split {split}, revision {revision}): "
                f"{type(err).__name__}: {reason.rstrip('.')}. Without network, use corpus.source: bundled (the default) or "
                f"pre-populate the Hugging Face cache (HF_HOME; here {constants.HF_HUB_CACHE}) on a machine that "
                f"can reach the hub (hf download {name} --repo-type dataset --revision {revision}) and copy it here."
            ) from None
        frame = frame[frame["score"].notna()]
        frames.append(
            pd.DataFrame(
                {
                    "year": year,
                    "split": split,
                    "domain": "all",  # the MTEB copies carry no sub-dataset column
                    "pair_id": range(len(frame)),
                    "score": frame["score"].astype(float).to_numpy(),
                    "sentence1": frame["sentence1"].map(clean_sentence).to_numpy(),
                    "sentence2": frame["sentence2"].map(clean_sentence).to_numpy(),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def pairs_to_sentences(pairs: pd.DataFrame, max_sentences: int | None = None) -> pd.DataFrame:
    """Two rows per pair (Sent1 then Sent2), numbered by a running ``sentence_id``."""
    import pandas as pd

    first = pairs.assign(side=1, text=pairs["sentence1"])
    second = pairs.assign(side=2, text=pairs["sentence2"])
    both = pd.concat([first, second])
    # Interleave: pair k gives rows 2k (side 1) and 2k+1 (side 2).
    both["_order"] = both.index.to_numpy() * 2 + (both["side"].to_numpy() - 1)
    sentences = both.sort_values("_order", kind="stable").reset_index(drop=True)
    if max_sentences is not None:
        sentences = sentences.iloc[:max_sentences]
    sentences["sentence_id"] = range(len(sentences))
    sentences = sentences.astype({"year": "int32", "pair_id": "int32", "side": "int8", "sentence_id": "int64"})
    return sentences[SENTENCE_COLUMNS]


def summarize(sentences: pd.DataFrame) -> str:
    """The counts the corpus log prints: pairs, sentences and unique sentences, per year and in all."""
    rows = []
    for (year, split), group in sentences.groupby(["year", "split"], sort=True):
        rows.append(
            f"STS{year} {split}: {group['pair_id'].groupby(group['domain']).nunique().sum()} pairs, "
            f"{len(group)} sentences, {group['text'].nunique()} unique"
        )
    n_pairs = len(sentences.drop_duplicates(["year", "split", "domain", "pair_id"]))
    rows.append(
        f"total: {n_pairs} pairs, {len(sentences)} sentences, {sentences['text'].nunique()} unique sentences, "
        f"{int((sentences['text'] == '').sum())} empty"
    )
    return "\n".join(rows)


def build_corpus(
    out_parquet: Path,
    *,
    source: str,
    pairs_jsonl: Path | None = None,
    years: list[int],
    include_2012_train: bool,
    max_sentences: int | None,
    hub_revisions: dict[int, str],
) -> pd.DataFrame:
    """Write ``sentences.parquet`` from the chosen source and return it."""
    if source == "bundled":
        pairs = load_pairs_bundled(pairs_jsonl)
    elif source == "hub":
        pairs = load_pairs_hub(years, include_2012_train, hub_revisions)
    else:
        raise CorpusError(f"corpus.source is {source!r}; allowed: 'bundled', 'hub'")
    sentences = pairs_to_sentences(pairs, max_sentences)
    for line in summarize(sentences).splitlines():
        log.info("%s", line)
    with atomic_path(out_parquet) as tmp:
        sentences.to_parquet(tmp, index=False)
    return sentences
