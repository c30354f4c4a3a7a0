"""What a session is made with and resumed from: nsbox's options, and the session's state
that ``resume`` reattaches with (serialized without secrets)."""
from __future__ import annotations

import uuid
from typing import Any, Dict, Mapping, Optional, Sequence, Union

from .errors import SandboxConfigError
from .manifest import Manifest


class NsboxSandboxClientOptions:
    """nsbox's options (``type="nsbox"``): ``size`` (standard, medium, large, xlarge),
    ``name``, ``net`` (none, host), ``files_quota``, ``volume`` (a named /mnt/files),
    ``env`` (added to the manifest's environment), ``lazy_kernel`` (no Python kernel until
    a cell: the SDK's sessions run commands, so a create costs less and the sandbox holds
    no idle interpreter; such creates never come from a warm pool)."""

    type = "nsbox"

    def __init__(self, size: Optional[str] = None, name: Optional[str] = None, net: Optional[str] = None,
                 files_quota: Union[None, int, str] = None, volume: Optional[str] = None,
                 env: Optional[Mapping[str, str]] = None, lazy_kernel: Optional[bool] = None,
                 type: str = "nsbox") -> None:
        if type != "nsbox":
            raise SandboxConfigError("options of type %r are not nsbox's" % type)
        self.size = size
        self.name = name
        self.net = net
        self.files_quota = files_quota
        self.volume = volume
        self.env = dict(env or {})
        self.lazy_kernel = lazy_kernel

    def to_dict(self) -> Dict[str, Any]:
        """Without environment values (their names only)."""
        out: Dict[str, Any] = {"type": "nsbox"}
        for k in ("size", "name", "net", "files_quota", "volume", "lazy_kernel"):
            v = getattr(self, k)
            if v is not None:
                out[k] = v
        if self.env:
            out["redacted_env"] = sorted(self.env)
        return out

    model_dump = to_dict

    @classmethod
    def parse(cls, payload: Any) -> "NsboxSandboxClientOptions":
        if payload is None:
            return cls()
        if isinstance(payload, cls):
            return payload
        if isinstance(payload, Mapping):
            d = dict(payload)
            d.pop("redacted_env", None)
            return cls(**d)
        if getattr(payload, "type", None) == "nsbox":
            return cls(size=getattr(payload, "size", None), name=getattr(payload, "name", None),
                       net=getattr(payload, "net", None), files_quota=getattr(payload, "files_quota", None),
                       volume=getattr(payload, "volume", None), lazy_kernel=getattr(payload, "lazy_kernel", None))
        raise SandboxConfigError("options for nsbox are NsboxSandboxClientOptions, not %s" % type(payload).__name__)


class NsboxSandboxSessionState:
    """What :meth:`NsboxSandboxClient.resume` needs to reattach: the sandbox's id, the
    manifest (without secrets), the options. Serialized by
    ``client.serialize_session_state(state)``: no token, credential or environment value
    in it."""

    type = "nsbox"

    def __init__(self, *, sandbox_id: str, manifest: Manifest, options: NsboxSandboxClientOptions,
                 session_id: Optional[str] = None, workspace_root_ready: bool = False,
                 exposed_ports: Sequence[int] = ()) -> None:
        self.session_id = session_id or uuid.uuid4().hex
        self.sandbox_id = sandbox_id
        self.manifest = manifest
        self.options = options
        self.snapshot: Dict[str, Any] = {"type": "noop"}
        self.exposed_ports = tuple(exposed_ports)
        self.workspace_root_ready = workspace_root_ready

    def to_dict(self) -> Dict[str, Any]:
        return {
            "type": self.type,
            "session_id": self.session_id,
            "sandbox_id": self.sandbox_id,
            "manifest": self.manifest.to_dict(),
            "options": self.options.to_dict(),
            "snapshot": dict(self.snapshot),
            "exposed_ports": list(self.exposed_ports),
            "workspace_root_ready": self.workspace_root_ready,
        }

    model_dump = to_dict

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> "NsboxSandboxSessionState":
        if payload.get("type") != "nsbox":
            raise SandboxConfigError("sandbox session state of type %r is not nsbox's" % payload.get("type"))
        sandbox_id = payload.get("sandbox_id")
        if not isinstance(sandbox_id, str) or not sandbox_id:
            raise SandboxConfigError("sandbox session state has no sandbox_id")
        manifest = Manifest.model_validate(payload.get("manifest") or {})
        state = cls(sandbox_id=sandbox_id, manifest=manifest,
                   options=NsboxSandboxClientOptions.parse(payload.get("options")),
                   session_id=str(payload.get("session_id") or "") or None,
                   workspace_root_ready=bool(payload.get("workspace_root_ready", False)),
                   exposed_ports=tuple(payload.get("exposed_ports") or ()))
        snapshot = payload.get("snapshot")
        if isinstance(snapshot, Mapping):
            state.snapshot = {str(k): v for k, v in snapshot.items()}
        return state

    def __repr__(self) -> str:
        return "NsboxSandboxSessionState(session_id=%r, sandbox_id=%r)" % (self.session_id, self.sandbox_id)
