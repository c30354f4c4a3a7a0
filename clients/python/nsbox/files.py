"""The files volume (/mnt/files: Files, RemoteFile) and the sandbox's whole view (Fs)."""
from __future__ import annotations

import hashlib
import os
import posixpath
import tempfile
from typing import Any, BinaryIO, Callable, Dict, Iterator, List, Optional, Union

from ._http import Client
from .errors import IntegrityError, NotFound, ProtocolError
from .models import FileEntry, FilePage, FsEntry, FsPage, FsStat, FsWrite, UploadRecord, parse_time

__all__ = ["Files", "Fs", "RemoteFile"]

PathLike = Union[str, "os.PathLike[str]"]

FILES_ROOT = "/mnt/files"
WORKSPACE_ROOT = "/home/user"
_BLOCK = 1 << 20


class _HashingReader:
    """A binary file read through, its sha-256 and size kept on the way."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self.sha256 = hashlib.sha256()
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        block = self._f.read(n)
        if block:
            self.sha256.update(block)
            self.size += len(block)
        return block


def files_path(path: PathLike) -> str:
    """A path of the files volume as the API takes it (relative to /mnt/files, or
    /mnt/files/...); the server checks it."""
    p = os.fspath(path)
    if not isinstance(p, str):
        raise TypeError("a path is a str")
    return p


def _inside_files(path: str) -> str:
    """``data/x`` and ``/mnt/files/data/x`` both as ``/mnt/files/data/x``."""
    if path == FILES_ROOT or path.startswith(FILES_ROOT + "/"):
        return path
    return FILES_ROOT + "/" + path.lstrip("/") if path not in ("", ".") else FILES_ROOT


class RemoteFile:
    """A file of ``/mnt/files`` (Composio's RemoteFile): its bytes (fetched on first use),
    and a signed link to it that needs no token until ``expires_at``.

    ``download_url`` is ``None`` for a server that serves a unix socket only and has no
    ``--public-url``; ``url_path`` (the link's path and query) then still works over the
    socket."""

    def __init__(self, files: "Files", path: str, link: Optional[Dict[str, Any]]) -> None:
        self._files = files
        self.path = _inside_files(path)
        self.name = posixpath.basename(self.path.rstrip("/"))
        link = link or {}
        url = link.get("download_url")
        url_path = link.get("url_path") or link.get("download_path")
        self.url_path: Optional[str] = url_path if isinstance(url_path, str) else None
        # A server without a TCP URL may give the path alone where the URL goes.
        self.download_url: Optional[str] = url if isinstance(url, str) and url.startswith("http") else None
        expires = link.get("expires_at")
        self.expires_at: Optional[str] = expires if isinstance(expires, str) else None
        self._data: Optional[bytes] = None

    @property
    def expires(self) -> Any:
        """``expires_at`` as an aware datetime (None when unknown)."""
        return parse_time(self.expires_at)

    def buffer(self) -> bytes:
        """The file's bytes (fetched once)."""
        if self._data is None:
            self._data = self._files.read_bytes(self.path)
        return self._data

    def text(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return self.buffer().decode(encoding, errors)

    def save(self, path: Optional[PathLike] = None, *, overwrite: bool = False) -> str:
        """Writes the file to ``path`` (a file name, or an existing directory to put it
        in; default: its name in the current directory) and returns where. An existing
        file is never replaced unless ``overwrite=True`` (FileExistsError); the file
        appears whole or not at all."""
        dest = os.fspath(path) if path is not None else self.name
        if os.path.isdir(dest):
            dest = os.path.join(dest, self.name)

        def fill(out: BinaryIO) -> None:
            if self._data is not None:
                out.write(self._data)
            else:
                self._files.read_into(self.path, out)

        return _save_atomically(dest, fill, overwrite=overwrite, mode=0o644)

    def __repr__(self) -> str:
        return "RemoteFile(path=%r, download_url=%r, expires_at=%r)" % (self.path, self.download_url, self.expires_at)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _save_atomically(dest: str, fill: Callable[[BinaryIO], Any], *, overwrite: bool, mode: int) -> str:
    """Writes ``dest`` with what ``fill(out)`` writes, whole or not at all: into a
    temporary file beside it, synced, then moved in. An existing file is never replaced
    unless ``overwrite`` (FileExistsError); a failure of ``fill`` leaves nothing."""
    if not overwrite and os.path.lexists(dest):
        raise FileExistsError("%s exists; pass overwrite=True to replace it" % dest)
    directory = os.path.dirname(os.path.abspath(dest))
    fd, temp = tempfile.mkstemp(prefix="." + os.path.basename(dest) + ".", suffix=".part", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            fill(out)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, mode & ~_umask())
        if overwrite:
            os.replace(temp, dest)
        else:
            # link() never replaces: the check above and the write cannot race.
            try:
                os.link(temp, dest)
            except FileExistsError:
                raise FileExistsError("%s exists; pass overwrite=True to replace it" % dest) from None
            except OSError:
                with open(temp, "rb") as src, open(dest, "xb") as out2:
                    while True:
                        block = src.read(_BLOCK)
                        if not block:
                            break
                        out2.write(block)
            os.unlink(temp)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise
    return dest


class Files:
    """``sbx.files``: the persistent ``/mnt/files`` volume (Composio's four methods).

    Paths are relative to /mnt/files (``data/sales.csv``) or absolute under it
    (``/mnt/files/data/sales.csv``). These work whether the sandbox runs, is busy or is
    dead."""

    def __init__(self, client: Client, base: str) -> None:
        self._client = client
        self._path = base + "/files"

    def upload(
        self,
        source: Union[PathLike, bytes, bytearray, memoryview, BinaryIO],
        path: Optional[str] = None,
        *,
        executable: bool = False,
        timeout: Optional[float] = None,
    ) -> UploadRecord:
        """Uploads a local file (a path), bytes or a binary file object to ``path`` in
        /mnt/files (default: the local file's name; a path ending in ``/`` is a directory
        to put it in). Atomic; parents made. The server's sha-256 is checked against the
        bytes sent (IntegrityError)."""
        close: Optional[BinaryIO] = None
        name: Optional[str] = None
        length: Optional[int] = None
        if isinstance(source, (str, os.PathLike)):
            local = os.fspath(source)
            f: BinaryIO = open(local, "rb")
            close = f
            name = os.path.basename(local)
            length = os.fstat(f.fileno()).st_size
            body: Any = _HashingReader(f)
        elif isinstance(source, (bytes, bytearray, memoryview)):
            data = bytes(source)
            length = len(data)
            body = data
        elif hasattr(source, "read"):
            fname = getattr(source, "name", None)
            name = os.path.basename(fname) if isinstance(fname, str) else None
            try:
                length = os.fstat(source.fileno()).st_size - source.tell()
            except (AttributeError, OSError, ValueError):
                length = None
            body = _HashingReader(source)
        else:
            raise TypeError("upload takes a local path, bytes or a binary file object, not %s" % type(source).__name__)
        try:
            if path is None or path.endswith("/"):
                if name is None:
                    raise ValueError("give the path in /mnt/files to upload bytes to")
                path = (path or "") + name
            headers = {"Content-Type": "application/octet-stream"}
            if length is not None:
                headers["Content-Length"] = str(length)
            doc = self._client.json("PUT", self._path, query={"path": files_path(path), "executable": executable or None},
                                    body=body, headers=headers, timeout=timeout)
        finally:
            if close is not None:
                close.close()
        record = UploadRecord(doc)
        sent = hashlib.sha256(body).hexdigest() if isinstance(body, bytes) else body.sha256.hexdigest()
        if record.sha256 and record.sha256 != sent:
            raise IntegrityError("the server's sha-256 of %s (%s) is not that of the bytes sent (%s)" % (record.path, record.sha256, sent))
        return record

    def list(self, path: str = FILES_ROOT, *, cursor: Optional[str] = None, limit: Optional[int] = None) -> FilePage:
        """One page of a directory of /mnt/files, sorted by name; ``page.next_cursor``
        continues."""
        directory = _inside_files(path)
        doc = self._client.json("GET", self._path + ":ls", query={"path": files_path(path), "cursor": cursor, "limit": limit})
        return FilePage(doc, directory)

    def iter(self, path: str = FILES_ROOT, *, page_size: Optional[int] = None) -> Iterator[FileEntry]:
        """Every entry of a directory, page after page."""
        cursor: Optional[str] = None
        while True:
            page = self.list(path, cursor=cursor, limit=page_size)
            for e in page.entries:
                yield e
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def download(self, path: str, *, expires_in: Optional[int] = None) -> RemoteFile:
        """A :class:`RemoteFile` for a regular file of /mnt/files, with a signed link
        (``expires_in`` seconds, the server's default 3600). NotFound when missing."""
        body = {} if expires_in is None else {"expires_in_s": int(expires_in)}
        link = self._client.json("POST", self._path + ":sign", query={"path": files_path(path)}, json_body=body)
        return RemoteFile(self, path, link)

    def sign(self, path: str, *, expires_in: Optional[int] = None) -> Dict[str, Any]:
        """The signed link document alone (``download_url``, ``expires_at``)."""
        body = {} if expires_in is None else {"expires_in_s": int(expires_in)}
        return self._client.json("POST", self._path + ":sign", query={"path": files_path(path)}, json_body=body)  # type: ignore[no-any-return]

    def read_bytes(self, path: str) -> bytes:
        """A file's bytes (no link made)."""
        return self._client.request("GET", self._path, query={"path": files_path(path)}).data

    def read_into(self, path: str, out: BinaryIO) -> int:
        """Streams a file into ``out``; returns the byte count (checked against the
        announced length)."""
        n = 0
        with self._client.open("GET", self._path, query={"path": files_path(path)}) as answer:
            for block in answer.iter_blocks(_BLOCK):
                out.write(block)
                n += len(block)
            if answer.length is not None and answer.length != n:
                raise ProtocolError("%s: %d bytes announced, %d received" % (path, answer.length, n))
        return n

    def delete(self, path: str, *, recursive: bool = False) -> List[str]:
        """Removes a file, an empty directory, or with ``recursive`` a whole tree.
        Returns what was removed (as /mnt/files/... paths)."""
        doc = self._client.json("DELETE", self._path, query={"path": files_path(path), "recursive": recursive or None})
        removed = doc.get("removed") if isinstance(doc, dict) else None
        return [str(x) for x in removed] if isinstance(removed, list) else []


class Fs:
    """``sbx.fs``: any path of the sandbox's own view (``/home/user``, ``/tmp``,
    ``/mnt/files``, read-write bucket mounts; read-only places for reading), with the
    sandbox user's rights, never following a symlink (PermissionDenied). Relative paths
    are under /home/user. The sandbox must be running.

    Every call takes ``run_as``: one of the sandbox's ``users`` whose rights it has
    instead (what it may not read or write is PermissionDenied, what it makes is its
    own; an unknown name is NotFound)."""

    def __init__(self, client: Client, base: str) -> None:
        self._client = client
        self._path = base + "/fs"

    def read(self, path: str, *, run_as: Optional[str] = None, timeout: Optional[float] = None) -> bytes:
        return self._client.request("GET", self._path, query={"path": path, "run_as": run_as}, timeout=timeout).data

    def read_text(self, path: str, encoding: str = "utf-8", *, run_as: Optional[str] = None) -> str:
        return self.read(path, run_as=run_as).decode(encoding)

    def write(
        self,
        path: str,
        data: Union[str, bytes, bytearray, memoryview, BinaryIO],
        *,
        mode: Optional[int] = None,
        run_as: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> FsWrite:
        """Writes a whole file atomically (parents made, 0755); ``mode`` default 0o644."""
        headers = {"Content-Type": "application/octet-stream"}
        if isinstance(data, str):
            data = data.encode("utf-8")
        if isinstance(data, (bytes, bytearray, memoryview)):
            payload: Any = bytes(data)
            headers["Content-Length"] = str(len(payload))
            digest: Optional[str] = hashlib.sha256(payload).hexdigest()
        elif hasattr(data, "read"):
            payload = _HashingReader(data)
            digest = None
        else:
            raise TypeError("fs.write takes str, bytes or a binary file object, not %s" % type(data).__name__)
        query: Dict[str, Any] = {"path": path, "run_as": run_as}
        if mode is not None:
            query["mode"] = "%04o" % mode
        doc = self._client.json("PUT", self._path, query=query, body=payload, headers=headers, timeout=timeout)
        if digest is None:
            digest = payload.sha256.hexdigest()
        result = FsWrite(doc, digest)
        if isinstance(doc, dict) and isinstance(doc.get("sha256"), str) and doc["sha256"] != digest:
            raise IntegrityError("the server's sha-256 of %s is not that of the bytes sent" % result.path)
        return result

    def extract(
        self,
        path: str,
        archive: Union[bytes, bytearray, memoryview, BinaryIO],
        *,
        format: str = "tar",
        max_members: Optional[int] = None,
        max_bytes: Optional[int] = None,
        run_as: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> Dict[str, Any]:
        """Unpacks a tar or zip archive into the directory ``path`` (made if missing) as the
        sandbox user. The server checks every member first and refuses the whole archive
        for an absolute path, ``..``, a link pointing out, a hard link, a device or FIFO, a
        duplicate, or more than ``max_members`` / ``max_bytes``; it never writes over an
        existing file. ``{"path", "members", "bytes"}``."""
        headers = {"Content-Type": "application/octet-stream"}
        payload: Any = archive
        if isinstance(archive, (bytes, bytearray, memoryview)):
            payload = bytes(archive)
            headers["Content-Length"] = str(len(payload))
        elif not hasattr(archive, "read"):
            raise TypeError("fs.extract takes bytes or a binary file object, not %s" % type(archive).__name__)
        query: Dict[str, Any] = {"path": path, "format": format, "max_members": max_members, "max_bytes": max_bytes,
                                "run_as": run_as}
        doc = self._client.json("PUT", self._path + ":extract", query=query, body=payload, headers=headers, timeout=timeout)
        return doc if isinstance(doc, dict) else {}

    def ls(self, path: str = WORKSPACE_ROOT, *, cursor: Optional[str] = None, limit: Optional[int] = None,
           run_as: Optional[str] = None) -> FsPage:
        """One page of a directory listing; ``page.next_cursor`` continues."""
        query = {"path": path, "cursor": cursor, "limit": limit, "run_as": run_as}
        doc = self._client.json("GET", self._path + ":ls", query=query)
        return FsPage(doc, path if path.startswith("/") else posixpath.join(WORKSPACE_ROOT, path))

    def iter(self, path: str = WORKSPACE_ROOT, *, page_size: Optional[int] = None,
             run_as: Optional[str] = None) -> Iterator[FsEntry]:
        """Every entry of a directory, page after page."""
        cursor: Optional[str] = None
        while True:
            page = self.ls(path, cursor=cursor, limit=page_size, run_as=run_as)
            for e in page.entries:
                yield e
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def mkdir(self, path: str, *, parents: bool = False, run_as: Optional[str] = None) -> str:
        """Makes a directory (AlreadyExists when it exists, unless ``parents``)."""
        query = {"path": path, "parents": parents or None, "run_as": run_as}
        doc = self._client.json("POST", self._path + ":mkdir", query=query)
        return str(doc.get("path", path)) if isinstance(doc, dict) else path

    def rm(self, path: str, *, recursive: bool = False, run_as: Optional[str] = None) -> List[str]:
        """Removes a file or an empty directory (a tree with ``recursive``; a missing path
        is then no error). Returns what was removed."""
        query = {"path": path, "recursive": recursive or None, "run_as": run_as}
        doc = self._client.json("DELETE", self._path, query=query)
        removed = doc.get("removed") if isinstance(doc, dict) else None
        return [str(x) for x in removed] if isinstance(removed, list) else []

    def stat(self, path: str, *, run_as: Optional[str] = None) -> FsStat:
        """Type, size, mode and mtime of a path (a last symlink itself, not followed)."""
        return FsStat(self._client.json("GET", self._path + ":stat", query={"path": path, "run_as": run_as}))

    def exists(self, path: str, *, run_as: Optional[str] = None) -> bool:
        try:
            self.stat(path, run_as=run_as)
            return True
        except NotFound:
            return False


class WorkspaceArchive:
    """The workspace root as one tar archive (``GET``/``PUT .../workspace.tar``,
    docs/api.md "Workspace archives"): what a sandbox's ``workspace_archive``,
    ``save_workspace_archive`` and ``replace_workspace`` do."""

    def __init__(self, client: Client, base: str) -> None:
        self._client = client
        self._path = base + "/workspace.tar"

    def read(self, *, timeout: Optional[float] = None) -> bytes:
        # Read whole by the client's own reader: a chunked answer without its last chunk
        # is ServerUnreachable, never a short archive.
        return self._client.request("GET", self._path, timeout=timeout).data

    def read_into(self, out: BinaryIO, *, timeout: Optional[float] = None) -> int:
        n = 0
        with self._client.open("GET", self._path, timeout=timeout) as answer:
            # http.client raises IncompleteRead for a chunked body cut before its last
            # chunk; the answer says it as ServerUnreachable.
            for block in answer.iter_blocks(_BLOCK):
                out.write(block)
                n += len(block)
        return n

    def save(self, dest: Union[PathLike, BinaryIO], *, overwrite: bool = False, timeout: Optional[float] = None) -> int:
        if hasattr(dest, "write"):
            return self.read_into(dest, timeout=timeout)  # type: ignore[arg-type]
        written = [0]

        def fill(out: BinaryIO) -> None:
            written[0] = self.read_into(out, timeout=timeout)

        _save_atomically(os.fspath(dest), fill, overwrite=overwrite, mode=0o600)  # type: ignore[arg-type]
        return written[0]

    def replace(self, archive: Union[PathLike, bytes, bytearray, memoryview, BinaryIO], *,
                timeout: Optional[float] = None) -> Dict[str, Any]:
        headers = {"Content-Type": "application/x-tar"}
        opened: Optional[BinaryIO] = None
        if isinstance(archive, (str, os.PathLike)):
            opened = open(os.fspath(archive), "rb")
            body: Any = opened
            headers["Content-Length"] = str(os.fstat(opened.fileno()).st_size)
        elif isinstance(archive, (bytes, bytearray, memoryview)):
            body = bytes(archive)
            headers["Content-Length"] = str(len(body))
        elif hasattr(archive, "read"):
            body = archive
            try:
                headers["Content-Length"] = str(os.fstat(archive.fileno()).st_size - archive.tell())
            except (AttributeError, OSError, ValueError):
                pass  # sent chunked
        else:
            raise TypeError("replace_workspace takes a local path, bytes or a binary file object, not %s"
                            % type(archive).__name__)
        # The answer comes once the archive is checked and swapped in: minutes for a large one.
        wait = max(self._client.timeout, 600.0) if timeout is None else timeout
        try:
            doc = self._client.json("PUT", self._path, body=body, headers=headers, timeout=wait)
        finally:
            if opened is not None:
                opened.close()
        return doc if isinstance(doc, dict) else {}
