"""A folder as one declared file (contextuality.core.archive): the model's form as a workflow output."""

import os
import queue
import shutil

from contextuality.core.archive import discard_unpacked, pack, unpacked

ANSWER_LIMIT_S = 600  # a wall-clock limit on one trial's jobs (each unpacks and reads 3 MB: seconds when idle)


def _folder(root):
    folder = root / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "sub" / "weights.bin").write_bytes(b"\0\1\2")
    return folder


def test_a_packed_folder_is_reused_in_place_and_unpacked_whole_elsewhere(tmp_path):
    folder = _folder(tmp_path)
    archive = pack(folder, tmp_path / "model.tar")
    assert unpacked(archive) == folder  # the job that packed it leaves the folder to the jobs that follow
    other = tmp_path / "pod"
    other.mkdir()
    copy = shutil.copy(archive, other / "model.tar")  # what a job on another machine downloads
    unpacked_folder = unpacked(copy)
    assert unpacked_folder == other / "model"
    assert (unpacked_folder / "sub" / "weights.bin").read_bytes() == b"\0\1\2"
    assert (unpacked_folder / "config.json").read_text() == "{}"
    assert sorted(path.name for path in other.iterdir()) == ["model", "model.tar"]  # no temporary left
    discard_unpacked(copy)
    assert sorted(path.name for path in other.iterdir()) == ["model.tar"]


def test_the_same_folder_gives_the_same_bytes_and_a_stale_folder_is_replaced(tmp_path):
    folder = _folder(tmp_path)
    first = pack(folder, tmp_path / "model.tar").read_bytes()
    os.utime(folder / "config.json", ns=(1, 1))  # times and owners are not part of the archive
    assert pack(folder, tmp_path / "model.tar").read_bytes() == first
    (folder / "config.json").write_text("changed")
    os.utime(folder, ns=(1, 1))  # a folder not from this archive: unpacked again
    assert (unpacked(tmp_path / "model.tar") / "config.json").read_text() == "{}"


def _unpack_and_read(archive, expected, barrier, results):
    """One job: wait for the others, unpack, then read every file of the folder as a model load would."""
    import hashlib

    from contextuality.core.archive import unpacked

    barrier.wait()
    try:
        folder = unpacked(archive)
        for _ in range(3):
            found = {path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
                     for path in sorted(folder.rglob("*")) if path.is_file()}  # fmt: skip
            if found != expected:
                results.put(f"a partial folder: {len(found)} of {len(expected)} files")
                return
        results.put("ok")
    except Exception as err:  # noqa: BLE001 (what the job would have died of)
        results.put(f"{type(err).__name__}: {err}")


def test_jobs_unpacking_one_archive_at_once_never_delete_or_half_show_each_others_folder(tmp_path):
    """Four jobs start on a model.tar whose folder is stale (its time changed, as a storage plugin's copy changes
    it): one unpacks, none removes the folder another is reading (before the fix, 8 of 15 trials failed)."""
    import hashlib
    import multiprocessing

    folder = tmp_path / "model"
    folder.mkdir()
    for i in range(200):  # enough files that replacing the folder takes a while
        (folder / f"shard-{i:03d}.bin").write_bytes(os.urandom(16384))
    expected = {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in folder.iterdir()}
    archive = pack(folder, tmp_path / "model.tar")
    context = multiprocessing.get_context("spawn")
    failures = []
    for trial in range(8):
        os.utime(archive, ns=(archive.stat().st_atime_ns, archive.stat().st_mtime_ns + 10**9))  # stale now
        barrier, results = context.Barrier(4), context.Queue()
        jobs = [context.Process(target=_unpack_and_read, args=(archive, expected, barrier, results)) for _ in range(4)]
        for job in jobs:
            job.start()
        try:
            outcomes = [results.get(timeout=ANSWER_LIMIT_S) for _ in jobs]
        except queue.Empty:
            for job in jobs:
                job.kill()
            raise TimeoutError(
                f"trial {trial}: the unpacking jobs gave no answer within {ANSWER_LIMIT_S} s, a slow machine's limit, "
                "not a broken install (this limit is ANSWER_LIMIT_S in tests/test_archive.py)"
            ) from None
        for job in jobs:
            job.join(timeout=60)
        failures += [f"trial {trial}: {outcome}" for outcome in outcomes if outcome != "ok"]
    assert failures == []
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model", "model.tar"]  # no temporary left
