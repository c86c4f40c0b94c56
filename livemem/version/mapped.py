"""Serving copies of segments: what retrieval reads of a segment, as plain arrays that every worker maps.

A serving worker needs a segment's chunk rows (for the few results a response returns, and a few columns for
filters), its parent files (``return: documents``), its vectors and its BM25 postings. Read into each worker's own memory, N workers hold N copies (at 500k
chunks, 3.3 GB each). Instead the first worker that loads a segment checks its files against the hashes its name
commits to (``livemem.engine.segments.load_segment``) and writes a **serving copy** of what it read: uncompressed arrays in one
file, ``<serving cache>/<segment id>/arrays.bin`` (``copy.json`` gives each one's dtype, shape and offset), written into a temporary directory and renamed into place (a copy that
exists is complete). Every worker, this one included, then maps the copy read-only (one ``mmap`` per segment, arrays over it):
the pages live once in the page cache, shared by all workers of the machine, and only the pages a response touches
are read.

Why a copy rather than mapping the segment's own files: those are compressed (Parquet) or zipped (``.npz``), and
a worker must survive the index files being damaged or truncated under it (a truncated memory-mapped file
ends the process with SIGBUS). The copy is the serving side's own, written from verified bytes; nothing else writes
it. A segment id names its content, so a copy never goes stale; copies of segments that no kept version names are
removed with them (``gc``), and by readers (``prune``).

A copy must never end a worker: a file truncated under a mapping ends the process with SIGBUS at the first access
past its new end (``truncate -s 0 .../arrays.bin`` would take every worker down), and Python cannot catch that.
So a copy is written read-only (``FILE_MODE`` 0440) into a directory only the service's user enters (``ROOT_MODE``
0700); it is mapped only after checking the open file (``_checked``: a regular file this user owns, writable by
nobody else, of its recorded size, ending with the random marker ``copy.json`` records); and every request checks
the size of each mapped copy before reading it (``Guard.intact``: one ``fstat`` of the mapping's descriptor, about a
microsecond). A copy that changed is dropped, removed and written again from the index's verified files, and the
request answered from the new one (``IndexReader.snapshot``). What remains: a process with the service's own rights
that truncates a copy while a request is between that check and its reads (milliseconds) still ends that worker;
such a process can end it anyway (``kill``), and uvicorn starts a new one.

Where: ``LIVEMEM_SERVING_CACHE`` if set (for example a local directory or tmpfs shared by the workers of one
machine when the index home is mounted read-only), else ``<home>/cache/serving``. The entry point reads it once into
its ``livemem.settings.EngineConfig`` (``serving_cache``) and passes it down: ``IndexHome.engine`` (the serving
state, the Dagster code location, the CLI), which the loader hands to ``cache_root``. When the directory cannot be
written, a worker keeps what it read in its own memory, as before, and says so once in its log.

Rows are stored by column. A text column is dictionary-encoded: ``<col>.codes`` (int32 per row, -1 for
NULL) over a dictionary of distinct values (``<col>.offsets`` into the UTF-8 bytes ``<col>.bytes``), so a
filter column (collection, access, county: a few distinct values) costs four bytes a row and its values are decoded
once. A number column is ``<col>.values`` with ``<col>.codes`` marking NULLs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import shutil
import stat
import threading
import time
import uuid
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

log = logging.getLogger(__name__)

SERVING_CACHE_ENV = "LIVEMEM_SERVING_CACHE"
COPY_FORMAT = 7  # 7: a marker ends the file; 6: sentence vectors (when the segment has them); 5: the parent files too; 4: int8 codes, scales and errors per row; 3: int8 codes for the first stage, no float16 copy; 2: one file of arrays per segment (1: .npy files)
META = "copy.json"
STALE_TMP_S = 3600.0  # a temporary directory older than this was left by a worker that died while writing
_WARNED: set[str] = set()
_WARN_LOCK = threading.Lock()


def cache_root(parts: Path, serving_cache: Path | None = None) -> Path:
    """Where serving copies of the segments in ``parts`` (``<home>/parts``) live: under ``serving_cache``
    (``EngineConfig.serving_cache``, ``LIVEMEM_SERVING_CACHE``) when given, else the home's ``cache/serving``."""
    if serving_cache:
        # one directory may serve several homes: a subdirectory per home keeps their copies (and pruning) apart
        home = hashlib.sha256(str(Path(parts).resolve().parent).encode()).hexdigest()[:16]
        return Path(serving_cache) / home
    return Path(parts).resolve().parent / "cache" / "serving"


class Table:
    """A segment's chunk rows, by column, over (mapped) arrays: ``row(i)`` is row ``i`` as a dict, ``column(name)``
    every value of a column as an object array (NULL: None), decoded once per distinct value."""

    def __init__(self, arrays: Mapping[str, np.ndarray], columns: dict[str, str], size: int) -> None:
        self.arrays = arrays
        self.kinds = columns  # column name -> "text" | "int" | "float"
        self.size = size
        self._dictionaries: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.size

    def row(self, row: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        dictionaries = self._dictionaries
        for name, kind, codes, first, second in self._columns:
            code = int(codes[row])
            if code < 0:
                out[name] = None
            elif kind == "text":
                decoded = dictionaries.get(name)
                out[name] = decoded[code] if decoded is not None else (
                    cast(np.ndarray, second)[first[code] : first[code + 1]].tobytes().decode("utf-8"))  # fmt: skip
            else:
                out[name] = int(first[row]) if kind == "int" else float(first[row])
        return out

    @cached_property
    def _columns(self) -> list[tuple[str, str, np.ndarray, np.ndarray, np.ndarray | None]]:
        """(name, kind, codes, offsets or values, bytes or None) of every column, looked up once."""
        a = self.arrays
        return [
            (name, kind, a[f"{name}.codes"], a[f"{name}.offsets"], a[f"{name}.bytes"]) if kind == "text"
            else (name, kind, a[f"{name}.codes"], a[f"{name}.values"], None)
            for name, kind in self.kinds.items()
        ]  # fmt: skip

    def dictionary(self, name: str) -> np.ndarray:
        """The distinct values of text column ``name`` in code order, then None (so ``dictionary[codes]`` maps the
        NULL code -1 to None)."""
        found = self._dictionaries.get(name)
        if found is None:
            offsets = np.asarray(self.arrays[f"{name}.offsets"])
            blob = self.arrays[f"{name}.bytes"].tobytes()
            values = [
                blob[a:b].decode("utf-8") for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)
            ]
            found = np.array([*values, None], dtype=object)
            with self._lock:
                self._dictionaries[name] = found
        return found

    def codes(self, name: str) -> np.ndarray:
        return self.arrays[f"{name}.codes"]

    def column(self, name: str) -> np.ndarray:
        """Every value of text column ``name``, as an object array (the distinct values are shared objects)."""
        return self.dictionary(name)[np.asarray(self.codes(name))]


def is_mapped(array: np.ndarray) -> bool:
    """Whether ``array``'s memory is a file mapping (a serving copy), not this process's own."""
    base: object = array
    while base is not None:
        if isinstance(base, (np.memmap, mmap.mmap)):
            return True
        base = base.obj if isinstance(base, memoryview) else getattr(base, "base", None)
    return False


def encode_frame(frame: pd.DataFrame, columns: dict[str, str]) -> dict[str, np.ndarray]:
    """The arrays of a ``Table`` holding ``frame``'s ``columns`` (name -> kind)."""
    arrays: dict[str, np.ndarray] = {}
    for name, kind in columns.items():
        series = frame[name]
        if kind == "text":
            codes, uniques = pd.factorize(series, use_na_sentinel=True)
            encoded = [str(v).encode("utf-8") for v in uniques]
            offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
            np.cumsum([len(b) for b in encoded], out=offsets[1:])
            arrays[f"{name}.codes"] = codes.astype(np.int32)
            arrays[f"{name}.offsets"] = offsets
            arrays[f"{name}.bytes"] = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        else:
            null = series.isna().to_numpy()
            dtype = np.int64 if kind == "int" else np.float64
            arrays[f"{name}.codes"] = np.where(null, -1, 0).astype(np.int32)
            arrays[f"{name}.values"] = series.fillna(0).to_numpy(dtype=dtype)
    return arrays


ARRAYS = "arrays.bin"
ALIGN = 64  # every array starts at a multiple of 64 bytes (a cache line; any dtype's alignment)


MARKER_BYTES = 32  # every copy ends with a random marker its copy.json records (a regrown or foreign file lacks it)
FILE_MODE = 0o440  # a copy is read-only, readable by the service's user and group only
ROOT_MODE = 0o700  # the directory of a home's copies: only the service's user enters it


class Guard:
    """The mapping of one serving copy and the size it was verified at. ``intact()`` asks the kernel for the size of
    the mapped file now (``fstat`` on the mapping's own descriptor, about a microsecond): a file truncated under a
    mapping ends the process with SIGBUS at the first access past its new end, so a reader checks before it reads
    (``IndexReader.snapshot``) and maps a fresh copy instead. A copy replaced or removed by name is harmless (the
    mapping keeps the old file); only truncating the very file mapped is."""

    def __init__(self, view: mmap.mmap, size: int, device: int, inode: int) -> None:
        self.view, self.size, self.device, self.inode = view, size, device, inode

    def intact(self) -> bool:
        try:
            return self.view.size() == self.size
        except (OSError, ValueError):  # closed
            return False


def write_copy(root: Path, segment_id: str, arrays: Mapping[str, np.ndarray], meta: dict[str, Any]) -> Path:
    """Write a serving copy (temporary directory, then one rename); a copy already there is kept as it is.

    All arrays go into one file (``arrays.bin``, described by ``copy.json``: dtype, shape and offset of each), so a
    worker maps one file per segment: a mapping holds a file descriptor, and one per array (tens per segment)
    exhausted a process's descriptors. The file ends with a random marker ``copy.json`` records; both files are
    made read-only (``FILE_MODE``) before the rename."""
    target = root / segment_id
    if (target / META).is_file():
        return target
    make_root(root)
    tmp = root / f".tmp-{segment_id}-{uuid.uuid4().hex}"
    tmp.mkdir()
    try:
        layout: dict[str, dict[str, Any]] = {}
        marker = uuid.uuid4().hex[:MARKER_BYTES].ljust(MARKER_BYTES, "0")
        with open(tmp / ARRAYS, "wb") as fh:
            for name, array in arrays.items():
                array = np.ascontiguousarray(array)
                fh.write(b"\0" * (-fh.tell() % ALIGN))
                layout[name] = {"dtype": array.dtype.str, "shape": list(array.shape), "offset": fh.tell()}
                if array.size:
                    # no copy of a large array (ignore: numpy's stubs give ndarray __buffer__ only on Python >= 3.12)
                    fh.write(memoryview(array.reshape(-1)).cast("B"))  # type: ignore[arg-type]
            fh.write(marker.encode("ascii"))
            size = fh.tell()
        body = {**meta, "format": COPY_FORMAT, "segment": segment_id, "size": size, "marker": marker,
                "arrays": layout}  # fmt: skip
        (tmp / META).write_text(json.dumps(body, indent=1), encoding="utf-8")
        for name in (ARRAYS, META):
            (tmp / name).chmod(FILE_MODE)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / META).is_file():  # not another worker's copy of the same segment: a real failure
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _checked(fh: Any, meta: dict[str, Any]) -> int:
    """The size of the open copy ``fh`` after checking it is the file ``meta`` describes: a regular file of its
    recorded size, owned by this user and writable by nobody else, ending with its marker."""
    status = os.fstat(fh.fileno())
    if not stat.S_ISREG(status.st_mode):
        raise ValueError(f"{ARRAYS} is not a regular file")
    if status.st_uid != os.geteuid() or status.st_mode & 0o022:
        raise ValueError(f"{ARRAYS} is owned by uid {status.st_uid} or writable by others")
    if status.st_size != meta["size"]:
        raise ValueError(f"{ARRAYS} has {status.st_size} bytes, the copy recorded {meta['size']}")
    marker = str(meta["marker"]).encode("ascii")
    if len(marker) != MARKER_BYTES or os.pread(fh.fileno(), MARKER_BYTES, status.st_size - MARKER_BYTES) != marker:
        raise ValueError(f"{ARRAYS} does not end with the marker its copy recorded")
    return status.st_size


def open_copy(root: Path, segment_id: str) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None:
    """The metadata and mapped arrays of the serving copy of ``segment_id`` (one read-only mapping of its file);
    None when there is none (or it is not the file it recorded: then it is removed, to be written again). The
    metadata's ``guard`` (a ``Guard``) tells later whether the mapped file is still whole."""
    directory = root / segment_id
    try:
        meta = json.loads((directory / META).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    arrays: dict[str, np.ndarray] = {}
    try:
        if not isinstance(meta, dict) or meta.get("format") != COPY_FORMAT or meta.get("segment") != segment_id:
            raise ValueError("another format")
        with open(directory / ARRAYS, "rb") as fh:
            found = _checked(fh, meta)
            view = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            status = os.fstat(fh.fileno())
        guard = Guard(view, found, status.st_dev, status.st_ino)
        for name, entry in meta["arrays"].items():
            dtype = np.dtype(entry["dtype"])
            count = int(np.prod(entry["shape"], dtype=np.int64))
            if count and entry["offset"] + count * dtype.itemsize > found - MARKER_BYTES:
                raise ValueError(f"array {name} lies beyond the end of {ARRAYS}")
            array = np.frombuffer(view, dtype=dtype, count=count, offset=entry["offset"]) if count else (
                np.zeros(0, dtype=dtype))  # fmt: skip
            arrays[name] = array.reshape(entry["shape"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("serving copy of %s at %s unusable (%s): written again", segment_id, directory, exc)
        remove(root, [segment_id])
        return None
    return {**meta, "guard": guard}, arrays


def discard(root: Path, segment_id: str, guard: Guard) -> None:
    """Remove the copy of ``segment_id`` if it is still the file ``guard`` maps (found damaged under it); a copy
    another worker has written again since is left alone."""
    try:
        status = os.stat(root / segment_id / ARRAYS)
    except OSError:
        return
    if (status.st_dev, status.st_ino) == (guard.device, guard.inode):
        remove(root, [segment_id])


def make_root(root: Path) -> None:
    """Create the directory of a home's copies, entered by the service's user only (``ROOT_MODE``)."""
    root.mkdir(mode=ROOT_MODE, parents=True, exist_ok=True)
    status = root.stat()
    if status.st_uid == os.geteuid() and stat.S_IMODE(status.st_mode) != ROOT_MODE:
        root.chmod(ROOT_MODE)


def writable(root: Path) -> bool:
    """Whether serving copies can be written under ``root`` (warns once per directory when not)."""
    try:
        make_root(root)
        owner = root.stat().st_uid
        if owner != os.geteuid():  # another user's directory (a shared LIVEMEM_SERVING_CACHE): its copies are theirs
            raise PermissionError(f"the directory belongs to uid {owner}")
        probe = root / f".probe-{uuid.uuid4().hex}"
        probe.touch()
        probe.unlink()
        return True
    except OSError as exc:
        with _WARN_LOCK:
            if str(root) not in _WARNED:
                _WARNED.add(str(root))
                log.warning(
                    "serving copies cannot be written at %s (%s): each worker keeps segments in its own memory; "
                    "set %s to a writable directory to share them",
                    root, exc, SERVING_CACHE_ENV,
                )  # fmt: skip
        return False


def remove(root: Path, segment_ids: list[str]) -> None:
    """Remove copies (a worker that maps one keeps its pages until it unmaps them: removal is safe under it)."""
    for segment_id in segment_ids:
        shutil.rmtree(root / segment_id, ignore_errors=True)


def prune(root: Path, parts: Path) -> list[str]:
    """Remove copies of segments that are gone from ``parts``, and temporary directories left by dead workers."""
    if not root.is_dir():
        return []
    removed = []
    now = time.time()
    for entry in root.iterdir():
        if entry.name.startswith(".tmp-") or entry.name.startswith(".probe-"):
            try:
                stale = now - entry.stat().st_mtime > STALE_TMP_S
            except OSError:
                continue
            if stale:
                shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
                removed.append(entry.name)
        elif entry.name.startswith("seg-") and not (parts / entry.name).is_dir():
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    return removed
