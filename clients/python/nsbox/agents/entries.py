"""Manifest entries: File, Dir, host sources, path grants, environment entries (mounts
are in mounts.py), and an entry from its dict form, whatever its type."""
from __future__ import annotations

import base64
from typing import Any, Dict, Mapping, Optional, Union

from .entry_base import _Entry
from .errors import ConfigurationError, ErrorCode, SandboxConfigError
from .mounts import _MOUNT_TYPES


class File(_Entry):
    """A file to make in the workspace: ``content`` (bytes, or text as UTF-8); default
    mode 0755 as in the SDK."""

    type = "file"

    def __init__(self, content: Union[bytes, str] = b"", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.content = content.encode("utf-8") if isinstance(content, str) else bytes(content)

    def to_dict(self) -> Dict[str, Any]:
        out = self._common()
        try:
            out["content"] = self.content.decode("utf-8")
        except UnicodeDecodeError:
            out["content_b64"] = base64.b64encode(self.content).decode("ascii")
        return out

    def __repr__(self) -> str:
        return "File(%d bytes)" % len(self.content)


class Dir(_Entry):
    """A directory to make in the workspace, with ``children`` (relative path → entry)."""

    type = "dir"

    def __init__(self, children: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.children: Dict[str, Any] = {str(k): _coerce_entry(v) for k, v in (children or {}).items()}

    def to_dict(self) -> Dict[str, Any]:
        out = self._common()
        if self.children:
            out["children"] = {k: v.to_dict() for k, v in self.children.items()}
        return out

    def __repr__(self) -> str:
        return "Dir(children=%r)" % (self.children,)


class _HostSource(_Entry):
    """An entry copied from the caller's machine, ``src``: relative to the working
    directory (or absolute), which it must stay under unless an extra path grant covers
    it; read by local_sources.py without following a link."""

    def __init__(self, src: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.src = str(src)

    def to_dict(self) -> Dict[str, Any]:
        out = self._common()
        out["src"] = self.src
        return out

    def __repr__(self) -> str:
        return "%s(%r)" % (type(self).__name__, self.src)


class LocalFile(_HostSource):
    """A file from the caller's machine; a symlink anywhere in its path refuses it
    (LocalFileReadError)."""

    type = "local_file"


class LocalDir(_HostSource):
    """A directory tree from the caller's machine (regular files and directories; any
    symlink, FIFO, socket or device refuses it: LocalDirReadError)."""

    type = "local_dir"


class GitRepo(_Entry):
    """A repository cloned on the caller's machine (hooks off) at ``ref`` (a branch, tag
    or 7-40 hex commit), its ``subpath`` (or all of it, without .git) copied like a
    LocalDir. ``repo``: ``owner/name`` on ``host``, a URL, or a local path."""

    type = "git_repo"

    def __init__(self, repo: str, ref: Optional[str] = None, subpath: Optional[str] = None, host: str = "github.com",
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.repo = str(repo)
        self.ref = ref
        self.subpath = subpath
        self.host = host

    def url(self) -> str:
        r = self.repo
        if "://" in r or r.startswith("/") or r.startswith("./") or r.startswith("../") or r == ".":
            return r
        return "https://%s/%s" % (self.host, r)

    def to_dict(self) -> Dict[str, Any]:
        out = self._common()
        out.update({"repo": self.repo, "ref": self.ref, "subpath": self.subpath, "host": self.host})
        return out

    def __repr__(self) -> str:
        return "GitRepo(%r, ref=%r)" % (self.repo, self.ref)


_SOURCE_TYPES = {"local_file": LocalFile, "local_dir": LocalDir, "git_repo": GitRepo}


class SandboxPathGrant:
    """A path outside the root that file calls may use (``read_only`` refuses writes).
    ``host_path`` (a Docker bind) is not supported by nsbox."""

    def __init__(self, path: str, read_only: bool = False, description: Optional[str] = None,
                 host_path: Optional[str] = None) -> None:
        self.path = path
        self.read_only = read_only
        self.description = description
        self.host_path = host_path

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"path": self.path, "read_only": self.read_only}
        if self.description is not None:
            out["description"] = self.description
        return out


def _coerce_entry(entry: Any) -> Any:
    """An entry object from an object or its dict form (``{"type": "file", ...}``)."""
    if isinstance(entry, (_Entry,)):
        return entry
    if isinstance(entry, Mapping):
        d = dict(entry)
        kind = d.pop("type", None)
        for ack in [k for k in d if "acknowledg" in k]:
            raise ConfigurationError(message="acknowledgements cannot come from a dict manifest: %s" % ack,
                                     error_code=ErrorCode.SANDBOX_CONFIG_INVALID, op="materialize")
        if kind == "file":
            if "content_b64" in d:
                d["content"] = base64.b64decode(d.pop("content_b64"))
            if "mode" in d:
                d["permissions"] = d.pop("mode")
            return File(**d)
        if kind == "dir":
            if "mode" in d:
                d["permissions"] = d.pop("mode")
            return Dir(**d)
        if kind in _SOURCE_TYPES:
            if "mode" in d:
                d["permissions"] = d.pop("mode")
            return _SOURCE_TYPES[kind](**d)
        if kind in _MOUNT_TYPES:
            return _MOUNT_TYPES[kind](**d)
        raise SandboxConfigError("manifest entries of type %r are not supported by nsbox" % (kind,),
                                 op="materialize")
    kind = getattr(entry, "type", None)
    if kind in ("file", "dir") and hasattr(entry, "to_dict"):
        return entry
    if kind in _SOURCE_TYPES:  # the SDK's own LocalFile, LocalDir, GitRepo
        fields = {k: getattr(entry, k) for k in ("src", "repo", "ref", "subpath", "host") if getattr(entry, k, None) is not None}
        for k in ("description", "ephemeral", "permissions"):
            if getattr(entry, k, None) is not None:
                fields[k] = getattr(entry, k)
        return _SOURCE_TYPES[kind](**fields)
    raise SandboxConfigError("manifest entries of type %r are not supported by nsbox (file, dir, local_file, "
                             "local_dir, git_repo and bucket mounts are)" % (kind or type(entry).__name__,), op="materialize")


class EnvEntry:
    """An environment value with a description (the SDK's EnvEntry)."""

    def __init__(self, value: str, description: Optional[str] = None, ephemeral: bool = False) -> None:
        self.value = value
        self.description = description
        self.ephemeral = ephemeral
