"""Checkpoint storage: parts and manifests, what counts as committed, retention, the
registry, and the same behaviour on a local folder and on a non-local filesystem."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest
from pyarrow._fs import _MockFileSystem

from cameo_actors.errors import CameoError
from cameo_actors.runtime._private.checkpoint.storage import (
    CheckpointDamaged,
    CheckpointStorage,
    StorageError,
)

DF, DEP = "df", "d1"


@dataclass
class Backend:
    """A storage and a way around it, to plant files it would never write itself."""

    storage: CheckpointStorage
    fs: pafs.FileSystem
    root: str

    def put(self, relative: str, data: bytes) -> None:
        path = f"{self.root}/{relative}"
        self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with self.fs.open_output_stream(path) as out:
            out.write(data)

    def files(self, relative: str = "") -> list[str]:
        base = f"{self.root}/{relative}".rstrip("/")
        infos = self.fs.get_file_info(pafs.FileSelector(base, recursive=True,
                                                        allow_not_found=True))
        return sorted(i.path[len(base) + 1:] for i in infos if i.type == pafs.FileType.File)


def _local(tmp_path: Path) -> Backend:
    root = str(tmp_path / "ckpt")
    return Backend(CheckpointStorage(root), pafs.LocalFileSystem(), root)


def _mock(tmp_path: Path) -> Backend:
    fs = _MockFileSystem()
    return Backend(CheckpointStorage("bucket/ckpt", filesystem=fs), fs, "bucket/ckpt")


@pytest.fixture(params=[_local, _mock], ids=["local", "mock"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    make: Callable[[Path], Backend] = request.param
    return make(tmp_path)


def _checkpoint(storage: CheckpointStorage, ckpt: int, commit: bool = True,
                dep: str = DEP, df: str = DF) -> dict[str, str]:
    parts = {aid: storage.write_part(df, dep, ckpt, aid, f"{aid}@{ckpt}".encode())
             for aid in (f"{df}/src/0", f"{df}/win/0")}
    if commit:
        storage.commit(df, dep, ckpt, {"parts": parts})
    return parts


def test_parts_and_manifest_round_trip(backend: Backend) -> None:
    s = backend.storage
    parts = _checkpoint(s, 7)
    manifest = s.latest(DF, DEP)
    assert manifest is not None
    assert manifest["parts"] == parts and manifest["checkpoint"] == 7
    assert isinstance(manifest["committed_at"], float)
    assert {s.read_part(p) for p in manifest["parts"].values()} == {b"df/src/0@7", b"df/win/0@7"}
    assert s.checkpoints(DF, DEP) == [7]
    # The layout the module promises, and no temporary file left behind.
    assert backend.files() == ["dataflows/df/d1/chk-0000000007/_manifest.json",
                               "dataflows/df/d1/chk-0000000007/df%2Fsrc%2F0",
                               "dataflows/df/d1/chk-0000000007/df%2Fwin%2F0"]


def test_manifest_keeps_json_values(backend: Backend) -> None:
    value: dict[str, Any] = {"s": "ü ✓", "i": -3, "f": 0.5, "t": True, "n": None,
                             "l": [1, "a", [None]], "d": {"x": {"y": False}}}
    backend.storage.commit(DF, DEP, 1, {"value": value})
    assert (backend.storage.latest(DF, DEP) or {})["value"] == value
    with pytest.raises(TypeError, match="only JSON values"):
        backend.storage.commit(DF, DEP, 2, {"blob": b"bytes"})
    assert backend.storage.checkpoints(DF, DEP) == [1]


def test_part_names_are_one_safe_file_each(backend: Backend) -> None:
    s = backend.storage
    names = ["_manifest.json", "..", ".", "a/b", "a%2Fb", "ü/0", "_tmp-x"]
    paths = {name: s.write_part(DF, DEP, 1, name, name.encode()) for name in names}
    assert len(set(paths.values())) == len(names)
    assert all(p.count("/") == 4 for p in paths.values())  # dataflows/df/d1/chk-*/<one name>
    assert {name: s.read_part(p) for name, p in paths.items()} == \
        {name: name.encode() for name in names}
    # A part named like the manifest does not commit the checkpoint.
    assert s.latest(DF, DEP) is None
    with pytest.raises(ValueError, match="non-empty str"):
        s.write_part(DF, DEP, 1, "", b"")
    with pytest.raises(ValueError, match="checkpoint number"):
        s.write_part(DF, DEP, -1, "p", b"")


def test_overwriting_a_part_replaces_it(backend: Backend) -> None:
    s = backend.storage
    path = s.write_part(DF, DEP, 1, "p", b"first, longer")
    assert s.write_part(DF, DEP, 1, "p", b"second") == path
    assert s.read_part(path) == b"second"


def test_read_part_errors(backend: Backend) -> None:
    with pytest.raises(StorageError, match=r"cannot read the checkpoint part .*Fix: "):
        backend.storage.read_part("dataflows/df/d1/chk-0000000001/missing")
    with pytest.raises(ValueError, match="as write_part returned it"):
        backend.storage.read_part("../outside")


def test_latest_skips_uncommitted_and_garbage_manifests(backend: Backend) -> None:
    s = backend.storage
    _checkpoint(s, 1)
    _checkpoint(s, 2, commit=False)  # parts, no manifest: being written, or abandoned
    _checkpoint(s, 3, commit=False)
    backend.put("dataflows/df/d1/chk-0000000003/_manifest.json", b'{"parts": {"df/src')
    _checkpoint(s, 4, commit=False)
    backend.put("dataflows/df/d1/chk-0000000004/_manifest.json", b"\xff\xfe garbage")
    _checkpoint(s, 5, commit=False)
    backend.put("dataflows/df/d1/chk-0000000005/_manifest.json", b"[1, 2]")
    backend.put("dataflows/df/d1/not-a-checkpoint/_manifest.json", b"{}")
    assert (s.latest(DF, DEP) or {})["checkpoint"] == 1
    assert s.checkpoints(DF, DEP) == [1]


def test_nothing_committed(backend: Backend) -> None:
    s = backend.storage
    assert s.latest(DF, DEP) is None and s.checkpoints(DF, DEP) == []
    _checkpoint(s, 1, commit=False)
    assert s.latest(DF, DEP) is None
    assert s.retire(DF, DEP, keep=1) == []
    assert backend.files("dataflows/df/d1") != []  # nothing to retire it in favour of


def test_retire_keeps_the_newest_and_what_may_be_being_written(backend: Backend) -> None:
    s = backend.storage
    for ckpt in (1, 3, 4, 5):
        _checkpoint(s, ckpt)
    abandoned = _checkpoint(s, 2, commit=False)
    writing = _checkpoint(s, 6, commit=False)
    assert s.retire(DF, DEP, keep=2) == [1, 2, 3]
    assert s.checkpoints(DF, DEP) == [4, 5]
    assert (s.latest(DF, DEP) or {})["checkpoint"] == 5
    assert s.read_part(writing["df/win/0"]) == b"df/win/0@6"
    with pytest.raises(StorageError):
        s.read_part(abandoned["df/win/0"])
    assert s.retire(DF, DEP, keep=2) == []
    assert s.retire(DF, DEP, keep=1) == [4]
    with pytest.raises(ValueError, match="keep >= 1"):
        s.retire(DF, DEP, keep=0)


def test_retire_keeps_the_checkpoints_a_kept_one_builds_on(backend: Backend) -> None:
    s = backend.storage
    full = _checkpoint(s, 1)
    _checkpoint(s, 2)
    win = f"{DF}/win/0"
    for ckpt, bases in ((3, [full[win]]), (4, [full[win], "x"])):
        path = s.write_part(DF, DEP, ckpt, win, b"delta")
        s.commit(DF, DEP, ckpt, {"parts": {win: path}, "bases": {win: bases}})
    assert s.retire(DF, DEP, keep=1) == [2, 3]  # 4 builds on 1
    assert s.read_part(full[win]) == b"df/win/0@1"
    _checkpoint(s, 5)  # a full one: nothing builds on 1 any more
    assert s.retire(DF, DEP, keep=1) == [1, 4]


def test_drop(backend: Backend) -> None:
    s = backend.storage
    for dep in ("d1", "d2"):
        _checkpoint(s, 1, dep=dep)
    _checkpoint(s, 1, df="other")
    s.drop(DF, "d1")
    assert s.latest(DF, "d1") is None and s.latest(DF, "d2") is not None
    s.drop(DF)
    assert s.latest(DF, "d2") is None
    assert backend.files("dataflows/df") == []
    assert s.latest("other", DEP) is not None
    s.drop(DF)  # missing is fine
    s.drop("never", "seen")


def test_registry(backend: Backend) -> None:
    s = backend.storage
    assert s.load_registry() is None
    registry = {"dataflows": {"df": {"spec": {"steps": [1, 2.5, None, True]}}}, "n": 0}
    s.save_registry({"old": 1})
    s.save_registry(registry)
    assert s.load_registry() == registry
    assert backend.files() == ["registry.json"]


@pytest.mark.parametrize("content", [b'{"dataflows": {', b"\xff", b'["not an object"]'])
def test_corrupt_registry(backend: Backend, content: bytes) -> None:
    backend.put("registry.json", content)
    with pytest.raises(StorageError, match=r"registry\.json.*corrupt.*Fix: ") as e:
        backend.storage.load_registry()
    assert isinstance(e.value, CameoError)


def test_check_writable(backend: Backend) -> None:
    backend.storage.check_writable()
    assert backend.files() == []  # the probe is gone


def test_check_writable_refuses_a_path_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    url = str(tmp_path / "file" / "sub")
    with pytest.raises(StorageError, match="cannot write there") as e:
        CheckpointStorage(url).check_writable()
    assert repr(url) in str(e.value) and "Fix: " in str(e.value)
    fs = _MockFileSystem()
    with fs.open_output_stream("file") as out:
        out.write(b"")
    with pytest.raises(StorageError, match=r"'file/sub': cannot write there.*Fix: "):
        CheckpointStorage("file/sub", filesystem=fs).check_writable()


def test_local_urls_name_the_same_folder(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "with space"
    parts = _checkpoint(CheckpointStorage(str(folder)), 1)
    via_url = CheckpointStorage(folder.as_uri())
    assert folder.as_uri().startswith("file:///") and "%20" in folder.as_uri()
    assert via_url.url == folder.as_uri()
    assert (via_url.latest(DF, DEP) or {})["parts"] == parts
    assert via_url.read_part(parts["df/win/0"]) == b"df/win/0@1"
    assert (folder / "dataflows/df/d1/chk-0000000001/_manifest.json").is_file()
    # A relative folder is made absolute, so a later chdir does not move it.
    monkeypatch.chdir(tmp_path)
    relative = CheckpointStorage("rel")
    monkeypatch.chdir(folder)
    relative.save_registry({})
    assert (tmp_path / "rel" / "registry.json").is_file()


def test_urls_that_cannot_be_used(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match=r"'nope://x/y'.*Fix: "):
        CheckpointStorage("nope://x/y")
    with pytest.raises(StorageError, match="host 'elsewhere'"):
        CheckpointStorage("file://elsewhere/x")
    with pytest.raises(ValueError, match="URL"):
        CheckpointStorage("")


class _NoMove(pafs.FileSystemHandler):
    """A filesystem that cannot move files (as some object stores): all else delegated."""

    def __init__(self) -> None:
        self.fs = _MockFileSystem()
        self.moves = 0

    def move(self, src: str, dest: str) -> None:
        self.moves += 1
        raise NotImplementedError("move")

    def get_type_name(self) -> str:
        return "nomove"

    def normalize_path(self, path: str) -> str:
        return path

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return self.fs.get_file_info(paths)

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return self.fs.get_file_info(selector)

    def create_dir(self, path: str, recursive: bool) -> None:
        self.fs.create_dir(path, recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self.fs.delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self.fs.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        self.fs.delete_dir_contents("/", accept_root_dir=True)

    def delete_file(self, path: str) -> None:
        self.fs.delete_file(path)

    def copy_file(self, src: str, dest: str) -> None:
        self.fs.copy_file(src, dest)

    def open_input_stream(self, path: str) -> Any:
        return self.fs.open_input_stream(path)

    def open_input_file(self, path: str) -> Any:
        return self.fs.open_input_file(path)

    def open_output_stream(self, path: str, metadata: Any) -> Any:
        return self.fs.open_output_stream(path, metadata=metadata)

    def open_append_stream(self, path: str, metadata: Any) -> Any:
        return self.fs.open_append_stream(path, metadata=metadata)


def test_a_filesystem_without_move_writes_in_place() -> None:
    handler = _NoMove()
    fs = pafs.PyFileSystem(handler)
    backend = Backend(CheckpointStorage("root", filesystem=fs), fs, "root")
    s = backend.storage
    parts = _checkpoint(s, 1)
    s.save_registry({"a": 1})
    assert (s.latest(DF, DEP) or {})["parts"] == parts
    assert s.read_part(parts["df/src/0"]) == b"df/src/0@1"
    assert s.load_registry() == {"a": 1}
    assert handler.moves == 1  # tried once, then written in place
    assert not [f for f in backend.files() if "_tmp-" in f]


# -- damage: every part and manifest carries a checksum ---------------------------------------
def _damage(backend: Backend, relative: str, change: Callable[[bytes], bytes]) -> None:
    with backend.fs.open_input_stream(f"{backend.root}/{relative}") as stream:
        data = bytes(stream.read())
    backend.put(relative, change(data))


@pytest.mark.parametrize("how, found", [
    (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "crc32"),  # a bit flipped on disk
    (lambda b: b[: len(b) // 2], "crc32"),  # torn: half written
    (lambda b: b"", "no checksum header"),
    (lambda b: b[8:], "no checksum header"),  # what an older writer left
], ids=["bit", "torn", "empty", "headless"])
def test_a_damaged_part_is_refused_with_the_cause(backend: Backend, how: Callable[[bytes], bytes],
                                                  found: str) -> None:
    parts = _checkpoint(backend.storage, 1)
    _damage(backend, parts["df/win/0"], how)
    with pytest.raises(CheckpointDamaged, match=f"is damaged \\({found}.*Fix: restore an earlier"):
        backend.storage.read_part(parts["df/win/0"])
    assert backend.storage.read_part(parts["df/src/0"]) == b"df/src/0@1"


def test_a_deleted_part_is_damage_too(backend: Backend) -> None:
    parts = _checkpoint(backend.storage, 1)
    backend.fs.delete_file(f"{backend.root}/{parts['df/win/0']}")
    with pytest.raises(CheckpointDamaged, match="was deleted"):
        backend.storage.read_part(parts["df/win/0"])


def test_a_damaged_manifest_does_not_count_and_says_why(backend: Backend) -> None:
    s = backend.storage
    for ckpt in (1, 2, 3):
        _checkpoint(s, ckpt)
    _checkpoint(s, 4, commit=False)  # being written: not listed
    manifest = "dataflows/df/d1/chk-0000000003/_manifest.json"
    _damage(backend, manifest, lambda b: b.replace(b"win/0", b"win/1"))  # edited by hand
    _damage(backend, "dataflows/df/d1/chk-0000000002/_manifest.json", lambda b: b[:10])
    listed = s.restorable(DF, DEP)
    assert [(c, m is not None) for c, m, _ in listed] == [(3, False), (2, False), (1, True)]
    assert "does not match its checksum" in (listed[0][2] or "")
    assert "does not parse" in (listed[1][2] or "")
    latest = s.latest(DF, DEP)
    assert latest is not None and latest["checkpoint"] == 1 and s.checkpoints(DF, DEP) == [1]
    assert s.manifest(DF, DEP, 3) is None and s.manifest(DF, DEP, 1) == latest


def test_a_part_given_as_pieces_is_written_one_after_the_other(backend: Backend) -> None:
    s = backend.storage
    path = s.write_part(DF, DEP, 1, "df/win/0", [b"head", b"", b"piece 1", b"piece 2"])
    assert bytes(s.read_part(path)) == b"headpiece 1piece 2"
    _damage(backend, path, lambda b: b.replace(b"piece 2", b"piece 3"))
    with pytest.raises(CheckpointDamaged, match="crc32"):
        s.read_part(path)


def test_marks_show_which_storage_a_process_reaches(tmp_path: Path) -> None:
    """The start of a pool leaves marks; a process that sees other folders of the same
    names (another node's disks) finds neither, and removing them leaves none behind."""
    from cameo_actors.runtime._private.checkpoint.shared import (
        leave_marks,
        marks_missing,
        remove_marks,
    )
    from cameo_actors.runtime.config import RuntimeConfig

    here = RuntimeConfig(checkpoint_url=str(tmp_path / "a" / "ck"), ingress_log_dir=str(tmp_path / "a" / "in"))
    elsewhere = RuntimeConfig(checkpoint_url=str(tmp_path / "b" / "ck"),
                              ingress_log_dir=str(tmp_path / "b" / "in"))
    leave_marks(here, "t1")
    assert marks_missing(here, "t1") == []
    assert marks_missing(here, "t2") == [f"checkpoint_url {here.checkpoint_url}",
                                         f"ingress_log_dir {here.ingress_log_dir}"]
    assert marks_missing(elsewhere, "t1") == [f"checkpoint_url {elsewhere.checkpoint_url}",
                                              f"ingress_log_dir {elsewhere.ingress_log_dir}"]
    remove_marks(here, "t1")
    assert marks_missing(here, "t1") != []
    assert not list((tmp_path / "a" / "ck" / "_marks").iterdir())
    assert not list((tmp_path / "a" / "in" / "_marks").iterdir())
