"""A sense-tagged corpus in the WSD evaluation format as the sense usages' source (``senses.usages.source: wsd_xml``).

The format of Raganato et al. (2017), which SemCor and the Senseval/SemEval sets ship in: an XML file
``<corpus><text><sentence id=..><wf lemma pos>word</wf><instance id=.. lemma pos>word</instance>..`` and a gold
key file, one line ``instance_id sense_key [sense_key ...]`` per instance. Each instance's first sense key names
its WordNet 3.0 synset (NLTK's ``lemma_from_key``); every key is checked. A sentence's text is its tokens joined
by single spaces (``"`` removed, as from every corpus sentence) and tokenised again with the project's spaCy
tokenizer; an instance is a usage when spaCy keeps its word as one token there and its lemma is a single word
whose lower-cased form is one of the corpus's forms. The XML is read with expat (the standard library's
parser), which gives each element's line for the messages.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from xml.parsers import expat

import pandas as pd

from contextuality.corpus.words import tokenize_with_offsets
from contextuality.senses.lexicon.inventory import pos_of
from contextuality.senses.lexicon.usages import UsageError, finish_usages

log = logging.getLogger(__name__)

SPLIT = "wsd_xml"
_FIX = "fix the file, or set senses.usages.source: wordnet"


@dataclass
class Sentence:
    """One ``<sentence>``: its id, line, and tokens (word, instance id or None, line)."""

    id: str
    line: int
    tokens: list = field(default_factory=list)


def read_wsd_xml(path: Path) -> list[Sentence]:
    """The sentences of a WSD corpus file; a malformed file, a token outside a sentence, an instance without id
    or lemma, a repeated instance id or an empty token raises UsageError naming ``path:line``."""
    reader = _Reader(path)
    try:
        with open(path, "rb") as handle:
            reader.parser.ParseFile(handle)
    except expat.ExpatError as err:
        raise UsageError(f"{path}:{err.lineno}: malformed XML ({expat.errors.messages[err.code]}); {_FIX}") from None
    return reader.sentences


class _Reader:
    """expat's handlers: sentences and their tokens, each instance's id and line."""

    def __init__(self, path: Path):
        self.path, self.sentences, self.seen = path, [], {}
        self.in_sentence, self.token = False, None  # token: [tag, instance id, line, text parts]
        self.parser = expat.ParserCreate()
        self.parser.StartElementHandler, self.parser.EndElementHandler = self.start, self.end
        self.parser.CharacterDataHandler = self.text

    def fail(self, message: str):
        raise UsageError(f"{self.path}:{self.parser.CurrentLineNumber}: {message}; {_FIX}")

    def start(self, tag: str, attrs: dict):
        line = self.parser.CurrentLineNumber
        if tag == "sentence":
            self.in_sentence = True
            self.sentences.append(Sentence(attrs.get("id", ""), line))
        elif tag in ("wf", "instance"):
            if not self.in_sentence or self.token is not None:
                self.fail(f"<{tag}> outside a <sentence>")
            missing = [key for key in ("id", "lemma") if tag == "instance" and not attrs.get(key)]
            if missing:
                self.fail(f"<instance> without {' and '.join(missing)}")
            ident = attrs["id"] if tag == "instance" else None
            if ident in self.seen:
                self.fail(f"instance id {ident!r} given twice (first at line {self.seen[ident]})")
            if ident is not None:
                self.seen[ident] = line
            self.token = [tag, ident, line, []]

    def end(self, tag: str):
        if tag == "sentence":
            self.in_sentence = False
        elif tag in ("wf", "instance"):
            tag, ident, line, parts = self.token
            word = "".join(parts).strip()
            if not word:
                self.fail(f"<{tag}> without a word")
            self.sentences[-1].tokens.append((word, ident, line))
            self.token = None

    def text(self, data: str):
        if self.token is not None:
            self.token[3].append(data)


def read_gold_key(path: Path) -> dict[str, tuple[list[str], int]]:
    """Each instance's sense keys and line; a line that is not ``instance_id sense_key [sense_key ...]``, or an
    instance given twice, raises UsageError naming ``path:line``. Blank lines are skipped."""
    keys: dict[str, tuple[list[str], int]] = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) < 2 or any("%" not in key for key in fields[1:]):
                raise UsageError(
                    f"{path}:{number}: {line.strip()[:80]!r} is not 'instance_id sense_key [sense_key ...]' (a WordNet "
                    f"sense key such as bank%1:14:00::); {_FIX}"
                )
            if fields[0] in keys:
                raise UsageError(
                    f"{path}:{number}: instance {fields[0]!r} given twice (first at line {keys[fields[0]][1]}); {_FIX}"
                )
            keys[fields[0]] = (fields[1:], number)
    return keys


def wsd_candidates(wordnet, xml: Path, gold_key: Path, forms: set[str]) -> pd.DataFrame:
    """The corpus's instances as candidate usages (the columns of ``usages.candidate_usages``)."""
    sentences, keys = read_wsd_xml(xml), read_gold_key(gold_key)
    instances = {ident: line for sentence in sentences for _, ident, line in sentence.tokens if ident is not None}
    for ident, line in instances.items():
        if ident not in keys:
            raise UsageError(f"{xml}:{line}: instance {ident!r} has no sense key in {gold_key}; {_FIX}")
    for ident, (_, line) in keys.items():
        if ident not in instances:
            raise UsageError(f"{gold_key}:{line}: instance {ident!r} is not in {xml}; {_FIX}")
    senses = {ident: _synsets(wordnet, gold_key, sense_keys, line)[0] for ident, (sense_keys, line) in keys.items()}
    texts, targets = [], []  # targets: (text index, char start, word, instance id)
    for sentence in sentences:
        text, instances = sentence_text(sentence)
        targets += [(len(texts), start, word, ident) for start, word, ident in instances]
        texts.append(text)
    spacy_words = tokenize_with_offsets(texts)
    tokens = [{start: word for word, start in words} for words in spacy_words]  # spaCy's words by character offset
    positions = [{start: position for position, (_, start) in enumerate(words)} for words in spacy_words]
    rows, split, other = [], 0, 0
    for index, start, word, ident in targets:
        synset, lemma = senses[ident]
        if "_" in lemma or lemma not in forms:
            other += 1
        elif tokens[index].get(start) != word:
            split += 1
        else:
            rows.append((synset.name(), lemma, pos_of(synset), synset.lexname(), texts[index], word,
                         positions[index][start], start))  # fmt: skip
    log.info("%s: %d instances, %d kept; %d of a multi-word lemma or not among the corpus's forms, %d that spaCy "
             "tokenises differently", xml, len(targets), len(rows), other, split)  # fmt: skip
    columns = ["synset", "lemma", "pos", "lexname", "text", "form", "position", "char_start"]
    return pd.DataFrame(rows, columns=columns).drop_duplicates(["lemma", "pos", "text", "position"])


def sentence_text(sentence: Sentence) -> tuple[str, list[tuple[int, str, str]]]:
    """The sentence's tokens joined by single spaces (``"`` removed, as clean_sentence does for every corpus
    sentence), and each instance's (character start, word, id) in it."""
    words, instances, start = [], [], 0
    for word, ident, _ in sentence.tokens:
        word = word.replace('"', "")
        if not word:
            continue
        if ident is not None:
            instances.append((start, word, ident))
        words.append(word)
        start += len(word) + 1
    return " ".join(words), instances


def _synsets(wordnet, gold_key: Path, sense_keys: list[str], line: int) -> list[tuple]:
    """Each sense key's (synset, lower-cased lemma name) in WordNet 3.0; a key it lacks raises UsageError."""
    found = []
    for key in sense_keys:
        try:
            lemma = wordnet.lemma_from_key(key)
        except Exception:  # noqa: BLE001 -- NLTK raises WordNetError, ValueError or KeyError for a bad key
            raise UsageError(
                f"{gold_key}:{line}: sense key {key!r} is not in WordNet 3.0 (keys of another version, such as 3.1 "
                f"or OEWN, differ); {_FIX}"
            ) from None
        found.append((lemma.synset(), key.split("%")[0].lower()))
    return found


def build_wsd_usages(wordnet, xml: Path, gold_key: Path, forms: set[str], *, max_lemmas: int | None, seed: int):
    """The usages, pairs and sentences of a WSD corpus (see ``usages.build_usages``)."""
    candidates = wsd_candidates(wordnet, Path(xml), Path(gold_key), {form.lower() for form in forms})
    return finish_usages(candidates, max_lemmas=max_lemmas, seed=seed, split=SPLIT)


def main(argv: list[str] | None = None) -> None:
    """``python -m contextuality.senses.lexicon.wsd_corpus CORPUS.xml OUT.txt``: the corpus's sentences as the usages read
    them, one a line, for ``corpus.source: text`` (W3b's clusterability and W4's regression read the study's corpus)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__.split(": ", 1)[1])
    parser.add_argument("xml", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    try:
        texts = [sentence_text(sentence)[0] for sentence in read_wsd_xml(args.xml)]
    except UsageError as err:
        raise SystemExit(str(err)) from None
    args.out.write_text("".join(f"{text}\n" for text in texts if text), encoding="utf-8")


if __name__ == "__main__":
    main()
