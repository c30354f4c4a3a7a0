"""The manifest: what a fresh sandbox starts with, checked before anything is made."""
from __future__ import annotations

import copy
import inspect
import posixpath
import re
from pathlib import PurePosixPath
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .entries import Dir, EnvEntry, GitRepo, LocalDir, LocalFile, SandboxPathGrant, _coerce_entry
from .entry_base import _group_name
from .errors import ConfigurationError, ErrorCode, InvalidManifestPathError, SandboxConfigError
from .mounts import _Mount
from .types import WORKSPACE_ROOT, _SANDBOX_USER


_DRIVE = re.compile(r"^[A-Za-z]:")


def _check_rel(key: str, shown: str) -> None:
    """The SDK's rule for manifest keys: relative, no ``..``."""
    if not key or key.startswith("/") or key.startswith("\\") or _DRIVE.match(key):
        raise InvalidManifestPathError(rel=shown, reason="absolute")
    if any(part == ".." for part in re.split(r"[/\\]", key)):
        raise InvalidManifestPathError(rel=shown, reason="escape_root")


class Manifest:
    """What a fresh sandbox starts with: ``entries`` (relative path → :class:`File`,
    :class:`Dir` or a mount), ``environment`` (name → value or :class:`EnvEntry`),
    ``extra_path_grants``. ``root`` (default ``/home/user``) is the sandbox's workspace root
    as written: ``/workspace``, the SDK's default, is where commands start and files go
    (docs/semantics.md, "The workspace root"); a root the server cannot take is its 422."""

    def __init__(
        self,
        *,
        version: int = 1,
        root: str = WORKSPACE_ROOT,
        entries: Optional[Mapping[str, Any]] = None,
        environment: Optional[Mapping[str, Any]] = None,
        users: Optional[Sequence[Any]] = None,
        groups: Optional[Sequence[Any]] = None,
        extra_path_grants: Optional[Sequence[Any]] = None,
        remote_mount_command_allowlist: Optional[Sequence[str]] = None,
    ) -> None:
        self.version = version
        self.root = root
        self.entries: Dict[str, Any] = {str(k): _coerce_entry(v) for k, v in (entries or {}).items()}
        self.environment: Dict[str, Any] = dict(environment or {})
        self.users = list(users or [])
        self.groups = list(groups or [])
        self.extra_path_grants: Tuple[SandboxPathGrant, ...] = tuple(
            g if isinstance(g, SandboxPathGrant) else SandboxPathGrant(**dict(g)) for g in (extra_path_grants or ()))
        self.remote_mount_command_allowlist = list(remote_mount_command_allowlist or [])

    @classmethod
    def model_validate(cls, data: Mapping[str, Any]) -> "Manifest":
        d = dict(data)
        for ack in [k for k in d if "acknowledg" in k]:
            raise ConfigurationError(message="acknowledgements cannot come from a dict manifest: %s" % ack,
                                     error_code=ErrorCode.SANDBOX_CONFIG_INVALID, op="materialize")
        d.pop("redacted_environment", None)
        return cls(**d)

    from_dict = model_validate

    # The SDK's acknowledgements: a copy, the paths ignored (the helpers run on the
    # host, the credentials never enter the sandbox).
    def with_in_container_mount_credential_exposure_acknowledged(self, *paths: Any) -> "Manifest":
        return copy.deepcopy(self)

    def with_broad_credential_exposure_acknowledged(self, *paths: Any) -> "Manifest":
        return copy.deepcopy(self)

    with_broad_in_container_mount_credential_exposure_acknowledged = with_broad_credential_exposure_acknowledged

    @property
    def root_path(self) -> PurePosixPath:
        """The root as the sandbox's path (``/workspace/`` is ``/workspace``)."""
        return PurePosixPath(posixpath.normpath(str(self.root)))

    def validate(self) -> None:
        """Refuses what nsbox cannot honour, before any side effect. Which absolute roots
        a sandbox can have is the server's rule (it names it in its 422)."""
        if not isinstance(self.root, str) or not self.root.startswith("/"):
            raise SandboxConfigError("the manifest's root is an absolute path in the sandbox (/workspace), not %r"
                                     % (self.root,), context={"root": str(self.root)})
        if self.users or self.groups:
            raise SandboxConfigError("nsbox sandboxes have one user, `user`: manifest users and groups are refused")
        for g in self.extra_path_grants:
            if g.host_path is not None:
                raise SandboxConfigError("extra path grants with host_path are not supported by nsbox",
                                         context={"path": g.path})
            p = posixpath.normpath(g.path) if g.path else ""
            if not g.path.startswith("/") or p == "/":
                raise SandboxConfigError("an extra path grant is an absolute path other than /: %r" % g.path)
        self._walk(self.entries, "")

    def _walk(self, entries: Mapping[str, Any], prefix: str) -> None:
        for key, entry in entries.items():
            _check_rel(key, prefix + key)
            group = _group_name(getattr(entry, "group", None))
            if group not in (None, _SANDBOX_USER):
                raise SandboxConfigError("group %r: nsbox sandboxes have one group, `user`" % group,
                                         context={"path": prefix + key})
            if isinstance(entry, Dir):
                self._walk(entry.children, prefix + key.rstrip("/") + "/")
            elif isinstance(entry, _Mount):
                target = entry.target(prefix + key, self.root_path)
                if ".." in target.split("/"):
                    raise InvalidManifestPathError(rel=target, reason="escape_root")

    def mount_targets(self) -> List[Tuple[_Mount, str]]:
        out: List[Tuple[_Mount, str]] = []

        def walk(entries: Mapping[str, Any], prefix: str) -> None:
            for key, entry in entries.items():
                if isinstance(entry, _Mount):
                    out.append((entry, prefix + key))
                elif isinstance(entry, Dir):
                    walk(entry.children, prefix + key.rstrip("/") + "/")

        walk(self.entries, "")
        return out

    def workspace_request(self) -> Dict[str, Any]:
        """The create request's "manifest": file and dir entries (mounts go to "mounts";
        host sources are copied by the client: local_sources.py)."""

        def strip(entries: Mapping[str, Any]) -> Dict[str, Any]:
            out: Dict[str, Any] = {}
            for key, entry in entries.items():
                if isinstance(entry, _Mount):
                    continue
                if isinstance(entry, (LocalFile, LocalDir, GitRepo)):
                    # Copied by the client after the create (local_sources.py); an
                    # ephemeral one's path is made now so that the server records it.
                    if entry.ephemeral:
                        out[key] = {"type": "file" if isinstance(entry, LocalFile) else "dir", "ephemeral": True}
                    continue
                d = entry.to_dict()
                d.pop("group", None)
                if isinstance(entry, Dir):
                    children = strip(entry.children)
                    d.pop("children", None)
                    if children:
                        d["children"] = children
                out[key] = d
            return out

        return {"root": str(self.root_path), "version": self.version, "entries": strip(self.entries)}

    def ephemeral_request(self) -> Dict[str, Any]:
        """The ephemeral file and dir entries alone (with the directories that hold them):
        what a resume makes again in a sandbox recreated from a snapshot, which never holds
        them."""

        def keep(entries: Mapping[str, Any]) -> Dict[str, Any]:
            out: Dict[str, Any] = {}
            for key, d in entries.items():
                if d.get("ephemeral"):
                    out[key] = d
                elif d.get("type") == "dir" and d.get("children"):
                    children = keep(d["children"])
                    if children:
                        out[key] = {**d, "children": children}
            return out

        request = self.workspace_request()
        request["entries"] = keep(request["entries"])
        return request

    def mounts_request(self) -> List[Dict[str, Any]]:
        return [m.request(key, self.root_path) for m, key in self.mount_targets()]

    def mount_topology(self) -> List[Dict[str, Any]]:
        return sorted((m.topology(key, self.root_path) for m, key in self.mount_targets()),
                      key=lambda d: str(d.get("mount_path")))

    def describe(self) -> str:
        lines = [str(self.root_path)]

        def walk(entries: Mapping[str, Any], depth: int) -> None:
            for key, entry in sorted(entries.items()):
                desc = getattr(entry, "description", None)
                lines.append("  " * depth + "- " + key + (": " + desc if desc else ""))
                if isinstance(entry, Dir) and depth < 3:
                    walk(entry.children, depth + 1)

        walk(self.entries, 1)
        return "\n".join(lines)

    def to_dict(self) -> Dict[str, Any]:
        """The manifest without secrets: mount credentials left out, environment values
        left out (their names kept)."""
        return {
            "version": self.version,
            "root": self.root,
            "entries": {k: v.to_dict() for k, v in self.entries.items()},
            "environment": {},
            "redacted_environment": sorted(self.environment),
            "extra_path_grants": [g.to_dict() for g in self.extra_path_grants],
            "remote_mount_command_allowlist": list(self.remote_mount_command_allowlist),
        }

    model_dump = to_dict


async def _resolve_env(environment: Mapping[str, Any]) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for name, value in environment.items():
        if isinstance(value, EnvEntry) or (hasattr(value, "value") and not callable(value)):
            value = value.value
        if callable(value):
            value = value()
        if inspect.isawaitable(value):
            value = await value
        if hasattr(value, "resolve") and callable(value.resolve):
            value = value.resolve()
            if inspect.isawaitable(value):
                value = await value
        out[str(name)] = str(value)
    return out
