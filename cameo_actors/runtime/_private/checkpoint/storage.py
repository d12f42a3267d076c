"""Durable checkpoint storage: a local folder, or any filesystem `pyarrow.fs` understands.

Under the root URL: ``registry.json`` (the controller's registry) and
``dataflows/<dataflow>/<deployment>/chk-<ckpt:010d>/`` holding one file per part
(one activation's state, its name URL-quoted) and ``_manifest.json``. Every file
is written under a temporary name and moved into place, and the manifest is
written last: a checkpoint counts only once its manifest is written, so a crash
mid-write leaves the previous one in use. Every part and manifest carries a
checksum (crc32): a part torn, damaged or changed by hand is refused when read
(`CheckpointDamaged`), a damaged manifest does not count, and recovery falls
back to the checkpoint before (`restorable`). A manifest may list, under "bases",
parts of earlier checkpoints that its incremental parts build on. Retention
(`retire`) keeps the newest committed checkpoints and those their manifests' bases
are in, and deletes the older ones and the abandoned ones below them, never a
folder above the newest committed one (it may be being written).
Pure: pyarrow and the standard library, no Ray.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import struct
import time
import uuid
import zlib
from collections.abc import Iterable
from typing import Any, cast
from urllib.parse import quote, unquote, urlsplit

import pyarrow.fs as pafs

from cameo_actors.errors import CameoError

REGISTRY = "registry.json"
MANIFEST = "_manifest.json"
logger = logging.getLogger(__name__)
_CHECKPOINT_DIR = re.compile(r"chk-(\d+)")
_IN_CHECKPOINT = re.compile(r"/chk-(\d+)/")
# Every OSError-like failure pyarrow raises: its own ArrowInvalid is a ValueError,
# ArrowNotImplementedError a NotImplementedError.
_FS_ERRORS = (OSError, ValueError, NotImplementedError)
_FIX_ACCESS = "check the storage is reachable and this pool may read and write it"
_FIX_WRITABLE = ("give a folder or bucket this pool may write "
                 "(RuntimeConfig.checkpoint_url, cameo serve --checkpoint-url)")


#: What a part starts with: this tag, then the crc32 of the rest (big-endian).
PART_TAG = b"CMP1"
_PART_HEAD = struct.Struct(">4sI")


class StorageError(CameoError):
    """Checkpoint storage cannot be used (message names the URL, the operation, the cause
    and the fix)."""


class CheckpointDamaged(StorageError):
    """A committed checkpoint's part is missing or does not match its checksum (a torn
    write, a bad disk, a file changed or deleted by hand): it must not be restored."""

    def __init__(self, message: str, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


def _checksum(manifest: dict[str, Any]) -> int:
    """The crc32 of a manifest's canonical JSON, its own checksum left out."""
    body = {k: v for k, v in manifest.items() if k != "checksum"}
    return zlib.crc32(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def _name(text: str) -> str:
    """`text` as one safe file name: "/" and the like quoted, and a leading "_" or "."
    quoted too, so no name can be "..", a manifest or a temporary file."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"expected a non-empty str as a dataflow, deployment or part name, "
                         f"got {text!r}. Fix: pass the id as a string")
    encoded = quote(text, safe="")
    if encoded[0] in "_.":
        encoded = f"%{ord(encoded[0]):02X}{encoded[1:]}"
    return encoded


def _checkpoint_number(ckpt: int) -> int:
    if isinstance(ckpt, bool) or not isinstance(ckpt, int) or ckpt < 0:
        raise ValueError(f"expected a checkpoint number (an int >= 0), got {ckpt!r}. "
                         f"Fix: pass the number the checkpoint was started with")
    return ckpt


class Files:
    """Files under one root URL, each written whole or not at all (under a temporary name,
    then moved into place), read back, listed and deleted; what `CheckpointStorage`
    keeps its checkpoints and registry in.

    Args:
        url: a folder (made absolute), a ``file://`` URL, or any URL
            `pyarrow.fs.FileSystem.from_uri` understands (``s3://``, ``gs://``,
            ``hdfs://``); with `filesystem`, the root path inside it.
        filesystem: a ready filesystem (tests); None: derived from `url`.
        sync: flush each file to disk before it is moved in place (local folders).
    """

    def __init__(self, url: str, filesystem: pafs.FileSystem | None = None, *,
                 sync: bool = True) -> None:
        if not isinstance(url, str):
            raise TypeError(f"expected the checkpoint storage URL as a str, got {url!r}. "
                            f"Fix: pass a folder or a URL such as 's3://bucket/checkpoints'")
        self.url = url
        if filesystem is not None:
            self._fs, root = filesystem, url
        else:
            self._fs, root = self._open(url)
        # Paths inside the filesystem are "<prefix><relative path>"; "" and "/" roots work.
        self._prefix = root if not root or root.endswith("/") else root + "/"
        # Cleared once the filesystem says it cannot move: files are then written in place.
        self._can_move = True
        self._local = isinstance(self._fs, pafs.LocalFileSystem)
        #: local files flushed to disk before they count (not for copies: their checksum
        #: tells a torn one, and the storage holds the original)
        self._sync = sync and self._local

    def _open(self, url: str) -> tuple[pafs.FileSystem, str]:
        if not url:
            raise ValueError("expected a checkpoint storage URL, got ''. Fix: give a folder "
                             "or a URL such as 's3://bucket/checkpoints'")
        parts = urlsplit(url)
        # A one-letter scheme is a Windows drive ("C:\\ckpt"), not a URL.
        if len(parts.scheme) <= 1:
            return pafs.LocalFileSystem(), os.path.abspath(url)
        if parts.scheme == "file":
            if parts.netloc not in ("", "localhost"):
                raise self._error("open", url, f"host {parts.netloc!r} in a file:// URL",
                                  "use file:///absolute/path, or a URL of a shared "
                                  "filesystem (s3://, gs://, hdfs://)")
            # Parsed here: pyarrow refuses file:// URLs with unquoted spaces.
            return pafs.LocalFileSystem(), os.path.abspath(unquote(parts.path))
        try:
            return cast(tuple[Any, str], pafs.FileSystem.from_uri(url))
        except _FS_ERRORS as e:
            raise self._error("open", url, e, "give a folder or a URL pyarrow.fs understands "
                              "(s3://, gs://, hdfs://) and install its support") from e

    # -- paths and primitives --------------------------------------------------

    def _error(self, operation: str, path: str, cause: object, fix: str) -> StorageError:
        return StorageError(f"checkpoint storage {self.url!r}: cannot {operation} {path!r} "
                            f"({cause}). Fix: {fix}")

    def _path(self, relative: str) -> str:
        return self._prefix + relative

    def _write(self, relative: str, data: bytes | list[bytes]) -> None:
        """Writes `data` (or its pieces, one after the other) at `relative` whole or not at
        all: to a temporary name, then moved."""
        final = self._path(relative)
        folder = final.rsplit("/", 1)[0] if "/" in final else ""
        try:
            if folder:
                self._fs.create_dir(folder, recursive=True)
            if not self._can_move:
                self._put(final, data)
                return
            temporary = f"{folder}/_tmp-{uuid.uuid4().hex}" if folder \
                else f"_tmp-{uuid.uuid4().hex}"
            self._put(temporary, data)
            try:
                self._fs.move(temporary, final)
            except NotImplementedError:
                # Only the manifest written last makes a checkpoint count, so writing in
                # place is still safe where a filesystem cannot move.
                self._can_move = False
                self._fs.delete_file(temporary)
                self._put(final, data)
        except _FS_ERRORS as e:
            raise self._error("write", final, e, _FIX_ACCESS) from e

    def _put(self, path: str, data: bytes | list[bytes]) -> None:
        with self._fs.open_output_stream(path) as out:
            for chunk in [data] if isinstance(data, bytes) else data:
                out.write(chunk)
        if self._sync:
            # Flushed before the move: after a power loss a renamed file could be empty.
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _read(self, path: str) -> bytes:
        with self._fs.open_input_stream(path) as stream:
            return bytes(stream.read())

    def _list(self, path: str) -> list[pafs.FileInfo]:
        """The entries directly in `path`; [] if it does not exist."""
        return list(self._fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)))

    def _delete_dir(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._fs.delete_dir(path)

    # -- the API ---------------------------------------------------------------

    def check_writable(self) -> None:
        """Creates the root, writes a probe file, reads it back and deletes it.

        Raises:
            StorageError: any step failed; the message names the URL, the cause and the fix.
        """
        probe = self._path(f"_probe-{uuid.uuid4().hex}")
        data = b"cameo checkpoint storage probe"
        try:
            if self._prefix.strip("/"):
                self._fs.create_dir(self._prefix.rstrip("/"), recursive=True)
            self._put(probe, data)
            back = self._read(probe)
            self._fs.delete_file(probe)
        except _FS_ERRORS as e:
            raise StorageError(f"checkpoint storage {self.url!r}: cannot write there ({e}). "
                               f"Fix: {_FIX_WRITABLE}") from e
        if back != data:
            raise StorageError(f"checkpoint storage {self.url!r}: cannot write there (a probe "
                               f"file read back {len(back)} bytes, {len(data)} were written). "
                               f"Fix: {_FIX_WRITABLE}")

    def leave_mark(self, token: str) -> None:
        """A file for other processes to look for (`has_mark`): do they reach this storage?"""
        self._write(f"_marks/{_name(token)}", token.encode())

    def has_mark(self, token: str) -> bool:
        try:
            return self._read(self._path(f"_marks/{_name(token)}")) == token.encode()
        except _FS_ERRORS:
            return False

    def remove_mark(self, token: str) -> None:
        with contextlib.suppress(*_FS_ERRORS):
            self._fs.delete_file(self._path(f"_marks/{_name(token)}"))


class CheckpointStorage(Files):
    """Checkpoints and the controller's registry under one root URL.

    Args: as `Files`.

    Example:
        >>> import tempfile
        >>> storage = CheckpointStorage(tempfile.mkdtemp())
        >>> path = storage.write_part("df", "d1", 1, "df/win/0", b"state")
        >>> storage.commit("df", "d1", 1, {"parts": {"df/win/0": path}})
        >>> storage.read_part(storage.latest("df", "d1")["parts"]["df/win/0"])
        b'state'
    """

    @staticmethod
    def _deployment_dir(dataflow: str, deployment: str | None = None) -> str:
        folder = f"dataflows/{_name(dataflow)}"
        return folder if deployment is None else f"{folder}/{_name(deployment)}"

    @classmethod
    def _checkpoint_dir(cls, dataflow: str, deployment: str, ckpt: int) -> str:
        return f"{cls._deployment_dir(dataflow, deployment)}/chk-{_checkpoint_number(ckpt):010d}"

    def write_part(self, dataflow: str, deployment: str, ckpt: int, part: str,
                   data: bytes | list[bytes]) -> str:
        """Writes one part of checkpoint `ckpt` (e.g. one activation's state), given whole
        or as pieces to write one after the other (never joined in memory).

        Returns:
            Its path relative to the root: what the manifest lists, and `read_part` takes.
        """
        relative = f"{self._checkpoint_dir(dataflow, deployment, ckpt)}/{_name(part)}"
        pieces = [bytes(data)] if not isinstance(data, list) else data
        crc = 0
        for piece in pieces:
            crc = zlib.crc32(piece, crc)
        self._write(relative, [_PART_HEAD.pack(PART_TAG, crc), *pieces])
        return relative

    def read_part(self, path: str) -> memoryview:
        """The bytes of a part, by the path `write_part` returned, checked against
        their checksum.

        Raises:
            CheckpointDamaged: it is missing, or its bytes do not match its checksum.
            StorageError: it cannot be read.
        """
        if not path or path.startswith("/") or ".." in path.split("/"):
            raise ValueError(f"expected a part's path as write_part returned it "
                             f"('dataflows/...'), got {path!r}. Fix: pass the path the "
                             f"checkpoint's manifest lists")
        full = self._path(path)
        try:
            raw = self._read(full)
        except FileNotFoundError as e:
            raise CheckpointDamaged(
                f"checkpoint storage {self.url!r}: cannot read the checkpoint part {full!r} "
                f"({e}). Fix: the checkpoint is incomplete, was retired or a file was "
                f"deleted; restore an earlier committed one (CheckpointStorage.restorable)",
                missing=True) from e
        except _FS_ERRORS as e:
            raise self._error("read the checkpoint part", full, e, _FIX_ACCESS) from e
        head = _PART_HEAD.size
        tag, crc = _PART_HEAD.unpack(raw[:head]) if len(raw) >= head else (b"", 0)
        data = memoryview(raw)[head:]  # no copy of a large part
        if tag != PART_TAG or zlib.crc32(data) != crc:
            found = "no checksum header" if tag != PART_TAG else \
                f"crc32 {zlib.crc32(data):#010x} of {len(data)} bytes, the header says {crc:#010x}"
            raise CheckpointDamaged(
                f"checkpoint storage {self.url!r}: the checkpoint part {full!r} is damaged "
                f"({found}: a torn write, a bad disk or a file changed by hand). Fix: "
                f"restore an earlier committed checkpoint (CheckpointStorage.restorable)")
        return data

    def commit(self, dataflow: str, deployment: str, ckpt: int, manifest: dict[str, Any]) -> None:
        """Writes the manifest of checkpoint `ckpt`, the last step: from now on it counts.

        The stored manifest also holds "checkpoint" (`ckpt`) and "committed_at" (Unix time).

        Raises:
            TypeError: the manifest holds something JSON cannot hold.
            StorageError: it cannot be written.
        """
        folder = self._checkpoint_dir(dataflow, deployment, ckpt)
        stored = {**manifest, "checkpoint": ckpt, "committed_at": time.time()}
        what = f"the manifest of checkpoint {ckpt} of {dataflow!r}/{deployment!r}"
        self._encode(stored, what)  # a clear error for what JSON cannot hold, first
        stored["checksum"] = _checksum(stored)
        data = self._encode(stored, what)
        self._write(f"{folder}/{MANIFEST}", data)

    def latest(self, dataflow: str, deployment: str) -> dict[str, Any] | None:
        """The manifest of the newest committed checkpoint; None if there is none.

        A folder without a manifest, or with one that does not parse (a crash while it was
        written where the filesystem cannot move), does not count.
        """
        for _, folder in reversed(self._folders(dataflow, deployment)):
            manifest = self._manifest(folder)
            if manifest is not None:
                return manifest
        return None

    def restorable(self, dataflow: str, deployment: str
                   ) -> list[tuple[int, dict[str, Any] | None, str | None]]:
        """The committed checkpoints, newest first: (number, manifest, None), or (number,
        None, why) for one whose manifest is damaged. A folder without a manifest (being
        written, or abandoned) is left out."""
        out: list[tuple[int, dict[str, Any] | None, str | None]] = []
        for ckpt, folder in reversed(self._folders(dataflow, deployment)):
            try:
                raw = self._read(f"{folder}/{MANIFEST}")
            except FileNotFoundError:
                continue
            except _FS_ERRORS as e:
                out.append((ckpt, None, f"its manifest cannot be read ({e})"))
                continue
            manifest, why = _parse_manifest(raw)
            out.append((ckpt, manifest, why))
        return out

    def manifest(self, dataflow: str, deployment: str, ckpt: int) -> dict[str, Any] | None:
        """The manifest of committed checkpoint `ckpt`; None if it has none, or a damaged one."""
        return self._manifest(self._path(self._checkpoint_dir(dataflow, deployment, ckpt)))

    def checkpoints(self, dataflow: str, deployment: str) -> list[int]:
        """The numbers of the committed checkpoints, ascending."""
        return [ckpt for ckpt, folder in self._folders(dataflow, deployment)
                if self._manifest(folder) is not None]

    def retire(self, dataflow: str, deployment: str, keep: int) -> list[int]:
        """Deletes every committed checkpoint but the newest `keep` and those their parts
        build on (the manifests' "bases"), and every uncommitted folder below the newest
        committed one (abandoned); never one above it (it may be being written). Folders
        that cannot be deleted are left for the next call.

        Returns:
            The numbers of the checkpoints deleted, ascending.
        """
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"expected keep >= 1 (the newest committed checkpoint is what a "
                             f"restart restores), got {keep!r}. Fix: pass 1 or more")
        folders = self._folders(dataflow, deployment)
        manifests = {ckpt: self._manifest(folder) for ckpt, folder in folders}
        committed = [ckpt for ckpt, _ in folders if manifests[ckpt] is not None]
        if not committed:
            return []
        newest = committed[-1]
        kept = set(committed[-keep:])
        kept |= {int(m.group(1)) for ckpt in kept
                 for paths in (manifests[ckpt] or {}).get("bases", {}).values()
                 for path in paths for m in [_IN_CHECKPOINT.search(path)] if m}
        deleted = []
        for ckpt, folder in folders:
            if ckpt >= newest or ckpt in kept:
                continue
            try:
                self._delete_checkpoint(folder)
            except _FS_ERRORS:
                continue
            deleted.append(ckpt)
        return deleted

    def drop(self, dataflow: str, deployment: str | None = None) -> None:
        """Deletes every checkpoint of a deployment, or of every deployment of the dataflow
        when `deployment` is None; a missing one is fine."""
        root = self._path(self._deployment_dir(dataflow, deployment))
        try:
            # Manifests first, so a crash halfway leaves nothing that still counts.
            deployments = [root] if deployment is not None else \
                [i.path for i in self._list(root) if i.type == pafs.FileType.Directory]
            for folder in deployments:
                for info in self._list(folder):
                    if info.type == pafs.FileType.Directory:
                        self._delete_manifest(info.path)
            self._delete_dir(root)
        except _FS_ERRORS as e:
            raise self._error("delete", root, e, _FIX_ACCESS) from e

    def keep_parts(self, dataflow: str, deployment: str, paths: Iterable[str]) -> None:
        """Deletes the checkpoint folders of a deployment below the newest one `paths` are
        in that hold none of them (for a store of parts without manifests: local copies);
        those above it may be being written."""
        kept = {int(m.group(1)) for path in paths for m in [_IN_CHECKPOINT.search(path)] if m}
        newest = max(kept, default=-1)
        for ckpt, folder in self._folders(dataflow, deployment):
            if ckpt < newest and ckpt not in kept:
                with contextlib.suppress(*_FS_ERRORS):
                    self._delete_dir(folder)

    def save_registry(self, data: dict[str, Any]) -> None:
        """Writes the controller's registry (JSON) at ``<root>/registry.json``, whole or not
        at all.

        Raises:
            TypeError: it holds something JSON cannot hold.
            StorageError: it cannot be written.
        """
        self._write(REGISTRY, self._encode(data, "the registry"))

    def load_registry(self) -> dict[str, Any] | None:
        """The controller's registry; None if none was saved.

        Raises:
            StorageError: it cannot be read, or does not parse as a JSON object.
        """
        path = self._path(REGISTRY)
        try:
            raw = self._read(path)
        except FileNotFoundError:
            return None
        except _FS_ERRORS as e:
            raise self._error("read the registry", path, e, _FIX_ACCESS) from e
        fix = ("restore the file from a backup, or delete it to start with an empty "
               "registry (the dataflows must then be submitted again)")
        try:
            data = json.loads(raw)
        except ValueError as e:  # bad JSON, bad UTF-8
            raise self._error("read the registry", path, f"corrupt: {e}", fix) from e
        if not isinstance(data, dict):
            raise self._error("read the registry", path,
                              f"corrupt: a JSON {type(data).__name__}, not an object", fix)
        return data

    def discard_registry(self, dataflows: Iterable[str]) -> None:
        """Delete the checkpoints of `dataflows` and empty the registry that lists them
        (an earlier run of the pool that nobody asked to resume)."""
        for name in dataflows:
            self.drop(name)
        self.save_registry({})

    # -- helpers of the API ----------------------------------------------------

    @staticmethod
    def _encode(value: dict[str, Any], what: str) -> bytes:
        try:
            return json.dumps(value, separators=(",", ":")).encode()
        except (TypeError, ValueError) as e:
            raise TypeError(f"{what}: expected only JSON values (dict with str keys, list, "
                            f"str, int, float, bool, None), got {e}. Fix: convert the value "
                            f"before storing it") from e

    def _folders(self, dataflow: str, deployment: str) -> list[tuple[int, str]]:
        """The checkpoint folders of a deployment, committed or not: (number, path),
        ascending; [] if they cannot be listed."""
        try:
            infos = self._list(self._path(self._deployment_dir(dataflow, deployment)))
        except _FS_ERRORS:
            return []
        folders = []
        for info in infos:
            match = _CHECKPOINT_DIR.fullmatch(info.base_name)
            if match and info.type == pafs.FileType.Directory:
                folders.append((int(match.group(1)), info.path))
        return sorted(folders)

    def _manifest(self, folder: str) -> dict[str, Any] | None:
        """The manifest in a checkpoint folder; None if missing, unreadable, damaged or
        garbage."""
        try:
            raw = self._read(f"{folder}/{MANIFEST}")
        except _FS_ERRORS:
            return None
        return _parse_manifest(raw)[0]

    def _delete_manifest(self, folder: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._fs.delete_file(f"{folder}/{MANIFEST}")

    def _delete_checkpoint(self, folder: str) -> None:
        # The manifest first: a checkpoint deleted halfway no longer counts.
        self._delete_manifest(folder)
        self._delete_dir(folder)


def _parse_manifest(raw: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """(the manifest, None), or (None, why it is damaged)."""
    try:
        manifest: Any = json.loads(raw)
    except ValueError as e:  # JSON and UTF-8 errors
        return None, f"its manifest does not parse ({e})"
    if not isinstance(manifest, dict):
        return None, f"its manifest is a JSON {type(manifest).__name__}, not an object"
    if manifest.get("checksum") != _checksum(manifest):
        return None, ("its manifest does not match its checksum (a torn write, a bad disk "
                      "or a file changed by hand)")
    return manifest, None
