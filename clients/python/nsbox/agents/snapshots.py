"""Snapshot specs of the SDK's shape, kept by the nsbox server (docs/semantics.md,
"Snapshots"): `stop()` persists the workspace there, `resume(state)` of a sandbox that is
gone makes a new one from it."""
from __future__ import annotations

from typing import Any, Dict, Optional

from .errors import SandboxConfigError


class NoopSnapshotSpec:
    """Nothing is persisted (the SDK's default for a direct ``client.create()``)."""

    type = "noop"


class NsboxSnapshotSpec:
    """Snapshots on the nsbox server: ``/home/user``, and ``/mnt/files`` with
    ``include_files``. Never a mount, never a secret. Where they are kept is the server's
    choice: its ``--snapshot-dir`` (the SDK's LocalSnapshotSpec), or a bucket with
    ``--snapshot-store s3://...`` (its RemoteSnapshotSpec), where any server given the same
    store can resume them."""

    type = "nsbox"

    def __init__(self, include_files: bool = False) -> None:
        self.include_files = include_files


def snapshot_state(spec: Any) -> Dict[str, Any]:
    """The state's ``snapshot`` document for a spec given to ``create``."""
    if spec is None or getattr(spec, "type", None) in (None, "noop"):
        return {"type": "noop"}
    if getattr(spec, "type", None) == "nsbox":
        return {"type": "nsbox", "include_files": bool(getattr(spec, "include_files", False)), "id": None}
    raise SandboxConfigError("nsbox keeps snapshots on its server: give NsboxSnapshotSpec() (or none), not %s"
                             % type(spec).__name__)


def restorable(state: Dict[str, Any]) -> Optional[str]:
    """The id of the snapshot a state can be restored from, if any."""
    if state.get("type") == "nsbox" and isinstance(state.get("id"), str) and state["id"]:
        return str(state["id"])
    return None
