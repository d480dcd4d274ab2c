"""A folder as one declared file (contextuality.core.archive): the model's form as a workflow output."""
import os
import shutil

from contextuality.core.archive import discard_unpacked, pack, unpacked


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
