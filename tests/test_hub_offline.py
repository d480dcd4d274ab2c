"""The hub sources, proven offline: a Hugging Face cache in the hub's own layout, no network.

``source: hub`` models and ``corpus.source: hub`` read the Hugging Face cache (``$HF_HOME/hub``). The
fixture writes one as huggingface_hub itself does (``file_download.py``, ``_snapshot_download.py``,
``_tree_cache.py``):

    $HF_HOME/hub/{models|datasets}--{org}--{name}/
        blobs/{etag}                      the files' bytes; etag = sha256 for an LFS file, else git's blob sha1
        refs/main                         the commit hash the branch pointed at (no newline)
        snapshots/{commit}/{path}         relative symlinks to ../../blobs/{etag}
        trees/{commit}.json               the commit's file listing (written by snapshot_download since 2.x)

It holds two tiny random models (a BERT and a GPT-2, with a newer ``main`` than the pinned commit and
stale pickle weights beside the safetensors) and the five MTEB STS repositories at the pinned commits,
their ``test.jsonl.gz`` (and 2012's ``train.jsonl.gz``) made from the bundled release files.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import PROJECT, STS_DIR, run_command, run_snakemake, with_absolute_data_paths, write_config
from contextuality.corpus import sts
from contextuality.workflow.checks import check_settings, checked_settings
from contextuality.workflow.schema import ConfigError, load_settings

BERT_ID, BERT_REV = "tiny-org/bert-tiny", "0123456789abcdef0123456789abcdef01234567"
GPT2_ID, GPT2_REV = "tiny-org/gpt2-tiny", "89abcdef0123456789abcdef0123456789abcdef"
GPT2_NEWER = "fedcba9876543210fedcba9876543210fedcba98"  # refs/main: a later commit, never to be used
ABSENT_REV = "1111111111111111111111111111111111111111"
LFS_SUFFIXES = (".safetensors", ".bin", ".h5", ".msgpack", ".gz", ".parquet")
GITATTRIBUTES = b"".join(f"*{suffix} filter=lfs diff=lfs merge=lfs -text\n".encode() for suffix in LFS_SUFFIXES)


# --------------------------------------------------------------------------------------------------
# The cache, in the hub's layout


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def add_snapshot(
    hub: Path,
    repo_type: str,
    repo_id: str,
    commit: str,
    files: dict[str, bytes],
    *,
    main: bool = True,
    tree: bool = False,
) -> Path:
    """One commit of a repository in the cache ``hub``, as hf_hub_download / snapshot_download write it."""
    storage = hub / f"{repo_type}s--{repo_id.replace('/', '--')}"
    listing = {}
    for name, data in files.items():
        lfs = name.endswith(LFS_SUFFIXES)
        etag = hashlib.sha256(data).hexdigest() if lfs else git_blob_id(data)
        blob = storage / "blobs" / etag
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = storage / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, link.parent), link)
        entry = {"size": len(data), "blob_id": git_blob_id(data)}
        if lfs:
            pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{etag}\nsize {len(data)}\n".encode()
            entry = {"size": len(data), "blob_id": git_blob_id(pointer), "lfs_sha256": etag, "lfs_size": len(data)}
        listing[name] = entry
    if main:
        (storage / "refs").mkdir(exist_ok=True)
        (storage / "refs" / "main").write_text(commit)
    if tree:
        (storage / "trees").mkdir(exist_ok=True)
        (storage / "trees" / f"{commit}.json").write_text(
            json.dumps({"format_version": 1, "files": dict(sorted(listing.items()))}, indent=1)
        )
    return storage


def blob_of(hub: Path, repo_id: str, commit: str, name: str) -> Path:
    return (hub / f"models--{repo_id.replace('/', '--')}" / "snapshots" / commit / name).resolve()


def folder_files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file()}


def bundled_texts(limit: int = 600) -> list[str]:
    pairs, _ = sts.read_release(sts.release_files(STS_DIR, 2012, "test", "MSRpar"))
    return [text for pair in pairs for text in (pair["sentence1"], pair["sentence2"])][:limit]


def mteb_rows(year: int, split: str) -> list[dict]:
    """A split of an MTEB STS repository made from the bundled files: scored pairs, raw text, file order."""
    rows = []
    for domain in sts.RELEASES[(year, split)]:
        if (year, split, domain) in sts.NOT_REDISTRIBUTABLE:
            continue  # MTEB's sts13-sts lacks SMT too (1,500 pairs)
        files = sts.release_files(STS_DIR, year, split, domain)
        for line, gold in zip(sts._read_lines(files.input), sts._read_lines(files.gold)):
            if gold.strip():
                sentence1, sentence2 = line.split("\t")[:2]
                rows.append({"split": split, "sentence1": sentence1, "sentence2": sentence2, "score": float(gold)})
    return rows


def jsonl_gz(rows: list[dict]) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as out:
        out.write("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode())
    return buffer.getvalue()


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory) -> Path:
    from contextuality.models.randommodels import build_random_model

    home = tmp_path_factory.mktemp("hf-home")
    hub, texts = home / "hub", bundled_texts()
    built = {}
    for architecture, layers in (("bert", 2), ("gpt2", 3)):
        out = tmp_path_factory.mktemp(f"built-{architecture}")
        build_random_model(architecture, texts, out, seed=11, n_hidden_layers=layers, hidden_size=32, vocab_size=400)
        built[architecture] = folder_files(out)
    # BERT: pickle weights cached beside the safetensors (as for google-bert/bert-base-cased), no tree listing
    # (a cache filled by from_pretrained / hf_hub_download file by file).
    add_snapshot(
        hub,
        "model",
        BERT_ID,
        BERT_REV,
        {**built["bert"], ".gitattributes": GITATTRIBUTES, "pytorch_model.bin": b"stale pickle, never read"},
    )
    # GPT-2: a tree listing (a cache filled by snapshot_download / `hf download`), and refs/main moved on.
    add_snapshot(hub, "model", GPT2_ID, GPT2_REV, {**built["gpt2"], ".gitattributes": GITATTRIBUTES}, tree=True)
    add_snapshot(
        hub,
        "model",
        GPT2_ID,
        GPT2_NEWER,
        {**built["gpt2"], "model.safetensors": b"a later commit's weights"},
        tree=True,
    )
    for year, (name, commit) in sts.HUB_DATASETS.items():
        files = {".gitattributes": GITATTRIBUTES, "test.jsonl.gz": jsonl_gz(mteb_rows(year, "test"))}
        if year == 2012:
            files["train.jsonl.gz"] = jsonl_gz(mteb_rows(year, "train"))
        add_snapshot(hub, "dataset", name, commit, files, tree=year == 2013)
    return home


def offline_env(home: Path) -> dict:
    return {
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(home / "hub"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }


def hub_smoke_config(**corpus_settings) -> dict:
    """config/smoke.yaml with its two models as hub models at pinned commits (paper.yaml's mechanics)."""
    config = with_absolute_data_paths(yaml.safe_load((PROJECT / "config" / "smoke.yaml").read_text()))
    keep = ("label", "stands_for", "indexing", "pooling")
    for key, (model_id, revision) in {"tiny-bert": (BERT_ID, BERT_REV), "tiny-gpt2": (GPT2_ID, GPT2_REV)}.items():
        old = config["models"][key]
        config["models"][key] = {
            "source": "hub",
            "id": model_id,
            "revision": revision,
            **{name: old[name] for name in keep if name in old},
        }
    config["corpus"].update(corpus_settings)
    return config


def python_lines(code: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return run_command([sys.executable, "-c", code], cwd=cwd, env={**os.environ, **env}, timeout=300, watch=cwd)


def failure(result) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}"


# --------------------------------------------------------------------------------------------------
# Models


@pytest.mark.slow
def test_hub_models_run_the_whole_pipeline_offline_from_the_cache_at_the_pinned_commit(hf_home, tmp_path):
    config = hub_smoke_config()
    config["extraction"]["n_shards"] = 1  # what is proven is the loading from the cache, not the sharding
    config = write_config(tmp_path / "hub.yaml", config)
    # up to every layer file of both models: what comes after reads the same files as in any other run
    layer_files = [
        f"results/embeddings/sts/{key}/layers/layer_{layer:02d}.h5"
        for key, n_layers in (("tiny-bert", 3), ("tiny-gpt2", 4))
        for layer in range(n_layers)
    ]
    result = run_snakemake(tmp_path, *layer_files, "--cores", "2", configfile=config, env=offline_env(hf_home))
    assert result.returncode == 0, failure(result)
    hub = hf_home / "hub"
    for key, model_id, commit, layers in (("tiny-bert", BERT_ID, BERT_REV, 3), ("tiny-gpt2", GPT2_ID, GPT2_REV, 4)):
        record = json.loads((tmp_path / "resources/models" / key / "source.json").read_text())
        blob = blob_of(hub, model_id, commit, "model.safetensors")
        assert (record["source"], record["id"], record["revision"]) == ("hub", model_id, commit)
        assert record["weights"] == ["model.safetensors"]
        # the weights' sha256 is the blob's, which the hub names by its sha256 (an LFS file)
        assert record["weights_sha256"] == hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name
        assert record["n_layers"] == layers
        folder = tmp_path / "resources/models" / key / "model"
        snapshot = hub / f"models--{model_id.replace('/', '--')}" / "snapshots" / commit
        # the pinned commit's files, copied (not links into the cache), and only the allowed ones
        assert {path.name for path in folder.iterdir()} - {".snakemake_timestamp"} == {
            name for name in os.listdir(snapshot) if name not in (".gitattributes", "pytorch_model.bin")
        }
        assert not any(path.is_symlink() for path in folder.iterdir())
        assert folder_files(folder)["config.json"] == (snapshot / "config.json").read_bytes()
        assert len(list((tmp_path / "results/embeddings/sts" / key / "layers").glob("layer_*.h5"))) == layers
    assert not (tmp_path / "resources/models/tiny-bert/download").exists()  # temporary, deleted once built


def test_hub_revision_missing_from_the_cache_is_one_line_naming_model_id_and_revision(hf_home, tmp_path):
    result = materialise_offline(hf_home, tmp_path, "tiny-gpt2", GPT2_ID, ABSENT_REV)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"contextuality.models.loading.ModelError: model 'tiny-gpt2' (source hub, {GPT2_ID} @ {ABSENT_REV}) could not be "
        "fetched: LocalEntryNotFoundError; "
        f"the Hugging Face cache {hf_home / 'hub'} holds {GPT2_ID} only at {GPT2_REV}, {GPT2_NEWER}. "
    ), last
    assert "pre-populate the Hugging Face cache (HF_HOME) on a machine that can reach the hub" in last
    assert f"hf download {GPT2_ID} --revision {ABSENT_REV}" in last
    assert not (tmp_path / "m" / "download").exists() and not (tmp_path / "m" / "model").exists()


def test_a_cached_weights_file_that_does_not_match_its_blob_name_is_refused(hf_home, tmp_path):
    home = tmp_path / "hf-home"
    cached = folder_files(hf_home / "hub" / f"models--{BERT_ID.replace('/', '--')}" / "snapshots" / BERT_REV)
    storage = add_snapshot(home / "hub", "model", BERT_ID, BERT_REV, cached)
    blob = blob_of(home / "hub", BERT_ID, BERT_REV, "model.safetensors")
    blob.write_bytes(blob.read_bytes()[:-1] + b"\x00")  # one changed byte: the blob's name no longer matches
    result = materialise_offline(home, tmp_path, "tiny-bert", BERT_ID, BERT_REV)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"contextuality.models.loading.ModelError: model 'tiny-bert' (source hub, {BERT_ID} @ {BERT_REV}): model.safetensors "
        f"in the Hugging Face cache does not match its sha256 {blob.name} (the cache is damaged)"
    ), last
    assert storage.is_dir() and not (tmp_path / "m" / "model").exists()


def materialise_offline(home: Path, workdir: Path, key: str, model_id: str, revision: str):
    """materialise() of a hub model in a process of its own, offline, with the Hugging Face cache ``home``."""
    workdir.mkdir(parents=True, exist_ok=True)
    code = (
        "from pathlib import Path\n"
        f"import sys; sys.path.insert(0, {str(PROJECT / 'tests')!r})\n"
        "from conftest import materialise\n"
        f"materialise({key!r}, {{'source': 'hub', 'id': {model_id!r}, 'revision': {revision!r}}}, Path('m'))\n"
    )
    return python_lines(code, offline_env(home), workdir)


def test_a_cached_config_that_does_not_match_its_blob_name_is_refused(hf_home, tmp_path):
    """Not only the weights: config.json and the tokenizer's files are checked against their blobs (git sha1)."""
    home = tmp_path / "hf-home"
    cached = folder_files(hf_home / "hub" / f"models--{BERT_ID.replace('/', '--')}" / "snapshots" / BERT_REV)
    add_snapshot(home / "hub", "model", BERT_ID, BERT_REV, cached)
    blob = blob_of(home / "hub", BERT_ID, BERT_REV, "config.json")
    assert blob.name == git_blob_id(blob.read_bytes())
    blob.write_text(blob.read_text().replace("{", '{"num_hidden_layers": 1, ', 1))  # still valid JSON, another model
    result = materialise_offline(home, tmp_path, "tiny-bert", BERT_ID, BERT_REV)
    assert result.returncode != 0, failure(result)
    last = result.stderr.strip().splitlines()[-1]
    assert last == (
        f"contextuality.models.loading.ModelError: model 'tiny-bert' (source hub, {BERT_ID} @ {BERT_REV}): config.json "
        f"in the Hugging Face cache does not match its git blob sha1 {blob.name} (the cache is damaged); delete {blob} "
        f"and {blob.parent.parent / 'snapshots' / BERT_REV} and download it again"
    ), last


def test_a_cache_copied_without_its_links_is_still_checked(hf_home, tmp_path):
    """``cp -rL`` (or ``scp -r``, ``rsync`` without ``-l``) leaves plain files in the snapshot: each must still be
    one of the repository's blobs, so an edited file is refused, and an intact copy used."""
    repo = f"models--{BERT_ID.replace('/', '--')}"
    home = tmp_path / "hf-home"
    shutil.copytree(hf_home / "hub" / repo, home / "hub" / repo, symlinks=False)  # what cp -rL does
    snapshot = home / "hub" / repo / "snapshots" / BERT_REV
    assert not any(path.is_symlink() for path in snapshot.iterdir())
    intact = materialise_offline(home, tmp_path / "intact", "tiny-bert", BERT_ID, BERT_REV)
    assert intact.returncode == 0, failure(intact)
    config = snapshot / "config.json"
    config.write_text(config.read_text().replace("{", '{"num_hidden_layers": 1, ', 1))
    result = materialise_offline(home, tmp_path / "edited", "tiny-bert", BERT_ID, BERT_REV)
    assert result.returncode != 0, failure(result)
    last = result.stderr.strip().splitlines()[-1]
    assert last == (
        f"contextuality.models.loading.ModelError: model 'tiny-bert' (source hub, {BERT_ID} @ {BERT_REV}): {config} in "
        "the Hugging Face cache is a plain file, not a link to a blob (a cache copied without its links), and its sha256 "
        f"and git blob sha1 name no blob in {home / 'hub' / repo / 'blobs'}: it is not the hub's file (edited or damaged); "
        "copy the cache with its links (cp -a, rsync -a), or delete that snapshot folder and download it again"
    ), last
    assert not (tmp_path / "edited" / "m" / "model").exists()


# --------------------------------------------------------------------------------------------------
# Revisions must be commits


@pytest.mark.parametrize(
    "revision",
    ["main", "v1.0", "cd5ef92", "CD5EF92A9FB2F889E972770A36D4ED042DAF221E", "cd5ef92a9fb2f889e972770a36d4ed042daf221g"],
)
def test_a_hub_revision_that_is_not_a_full_commit_hash_is_a_config_error(revision):
    config = hub_smoke_config(hub_revisions={"2013": revision})
    config["models"]["tiny-bert"]["revision"] = revision
    with pytest.raises(ConfigError) as raised:
        check_settings(load_settings(config))
    needed = (
        "is not a commit hash; a commit hash is required: the full 40-character lower-case hash "
        "(a branch or tag such as 'main' can move)"
    )
    assert str(raised.value).splitlines()[1:] == [
        f"  models.tiny-bert.revision: {revision!r} {needed}",
        f"  corpus.hub_revisions.2013: {revision!r} {needed}",
    ]


def test_pinned_commits_pass_the_revision_check_and_paper_yaml_is_pinned():
    check_settings(load_settings(hub_smoke_config(hub_revisions={"2012": sts.HUB_DATASETS[2012][1]})))
    check_settings(load_settings(yaml.safe_load((PROJECT / "config" / "paper.yaml").read_text())))


def test_an_unpinned_hub_revision_stops_the_run_before_any_job_naming_the_key():
    """Through the checks the Snakefile runs before any job (``checked_settings``); that a ConfigError there stops
    ``snakemake`` before any job with its one message and no traceback is test_config's command-line case."""
    config = hub_smoke_config()
    config["models"]["tiny-gpt2"]["revision"] = "main"
    with pytest.raises(ConfigError) as raised:
        checked_settings(config)
    assert str(raised.value).splitlines()[1:] == [
        "  models.tiny-gpt2.revision: 'main' is not a commit hash; a commit hash is required: "
        "the full 40-character lower-case hash (a branch or tag such as 'main' can move)"
    ]


# --------------------------------------------------------------------------------------------------
# Corpus


def bundled_sentences(tmp_path: Path, years: list[int], include_2012_train: bool) -> pd.DataFrame:
    pairs_jsonl = tmp_path / "pairs.jsonl"
    sts.write_bundled_pairs(STS_DIR, years, include_2012_train, pairs_jsonl)
    return sts.pairs_to_sentences(sts.load_pairs_bundled(pairs_jsonl))


@pytest.mark.slow
def test_hub_corpus_rule_runs_offline_from_the_cache_and_gives_the_bundled_sentences(hf_home, tmp_path):
    years = [2012, 2013, 2014, 2015, 2016]
    config = hub_smoke_config(source="hub", years=years, include_2012_train=True, max_sentences=None)
    result = run_snakemake(
        tmp_path,
        "results/corpora/sts/sentences.parquet",
        "--cores",
        "1",
        configfile=write_config(tmp_path / "c.yaml", config),
        env=offline_env(hf_home),
    )
    assert result.returncode == 0, failure(result)
    hub = pd.read_parquet(tmp_path / "results/corpora/sts/sentences.parquet")
    bundled = bundled_sentences(tmp_path, years, include_2012_train=True)
    same = ["sentence_id", "year", "split", "side", "score", "text"]
    pd.testing.assert_frame_equal(hub[same], bundled[same])  # same sentences, scores and order
    assert len(hub) == len(bundled) > 25_000
    # what the MTEB copies do not carry: the sub-dataset, and so its line numbers
    assert set(hub["domain"]) == {"all"}
    for _, group in hub[hub["side"] == 1].groupby(["year", "split"]):
        assert group["pair_id"].tolist() == list(range(len(group)))
    assert not (tmp_path / "results/corpora/sts/sts_pairs.jsonl").exists()  # the release files were not read
    log = (tmp_path / "logs/corpus/sts.log").read_text()
    assert "total:" in log


def test_hub_corpus_missing_from_the_cache_is_one_line_naming_dataset_and_revision(tmp_path):
    code = (
        "from pathlib import Path\n"
        "from contextuality.corpus.sts import build_corpus\n"
        "build_corpus(Path('s.parquet'), source='hub', years=[2014], include_2012_train=False, max_sentences=None, hub_revisions={})\n"
    )
    home = tmp_path / "empty-hf-home"
    result = python_lines(code, offline_env(home), tmp_path)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    name, commit = sts.HUB_DATASETS[2014]
    assert last.startswith(
        f"contextuality.corpus.sts.CorpusError: corpus.source 'hub': could not load {name} (split test, revision {commit}): "
        "LocalEntryNotFoundError: "
    ), last
    assert last.endswith(
        f"Without network, use corpus.source: bundled (the default) or pre-populate the Hugging Face cache (HF_HOME; "
        f"here {home / 'hub'}) on a machine that can reach the hub (hf download {name} --repo-type dataset "
        f"--revision {commit}) and copy it here."
    ), last
    assert not (tmp_path / "s.parquet").exists()


def test_datasets_load_dataset_offline_ignores_the_hub_cache_and_the_pinned_revision(hf_home, tmp_path):
    """Why sts.py does not call ``datasets.load_dataset(name, revision=...)`` (datasets 5.2).

    Offline, it raises before looking at the hub cache, then falls back to its own Arrow cache
    (``$HF_HOME/datasets/{org}___{name}/{config}/{version}/{commit}``), whose newest copy it returns
    whatever the commit it was made from. If this test fails, datasets changed: check whether the
    plain call now honours the pinned revision offline.
    """
    name, pinned = sts.HUB_DATASETS[2012]
    code = f"""
import json, os, datasets
from datasets.packaged_modules.json.json import Json
name, pinned = {name!r}, {pinned!r}
try:
    datasets.load_dataset(name, split="test", revision=pinned)
    print("loaded from the hub cache")
except ConnectionError as err:
    print("hub cache not used:", type(err).__name__, err)
# an Arrow cache as an online load of another commit leaves it
os.makedirs("other", exist_ok=True)
with open("other/test.jsonl", "w") as out:
    out.write(json.dumps({{"sentence1": "another", "sentence2": "commit", "score": 0.0}}) + "\\n")
Json(dataset_name="sts12-sts", hash="f" * 40, data_files={{"test": os.path.abspath("other/test.jsonl")}},
     config_name="default").download_and_prepare()
root = datasets.config.HF_DATASETS_CACHE
config_dir = next((root / "sts12-sts").iterdir())
os.makedirs(root / "mteb___sts12-sts")
os.rename(config_dir, root / "mteb___sts12-sts" / "default")
frame = datasets.load_dataset(name, split="test", revision=pinned).to_pandas()
print("offline rows:", frame["sentence1"].tolist())
"""
    home = tmp_path / "hf-home"
    (home / "hub").mkdir(parents=True)
    os.symlink(hf_home / "hub" / "datasets--mteb--sts12-sts", home / "hub" / "datasets--mteb--sts12-sts")
    result = python_lines(code, offline_env(home), tmp_path)
    assert result.returncode == 0, failure(result)
    assert (
        f"hub cache not used: ConnectionError Couldn't reach '{name}' on the Hub (OfflineModeIsEnabled)"
        in result.stdout
    )
    assert "offline rows: ['another']" in result.stdout  # the pinned commit's snapshot was in the hub cache
