"""What every manifest entry has (description, ephemeral, group, permissions), below both
entries.py (files, directories, host sources) and mounts.py (bucket mounts)."""
from __future__ import annotations

from typing import Any, Dict, Optional

from .errors import SandboxConfigError


def _mode_of(permissions: Any) -> Optional[int]:
    """An entry's ``permissions`` as a mode: an int, an octal string, or an object with
    ``to_mode()`` (the SDK's Permissions)."""
    if permissions is None:
        return None
    if hasattr(permissions, "to_mode"):
        return int(permissions.to_mode()) & 0o7777
    if isinstance(permissions, bool):
        raise SandboxConfigError("permissions must be a mode, not a bool")
    if isinstance(permissions, int):
        return permissions & 0o7777
    if isinstance(permissions, str):
        try:
            return int(permissions, 8) & 0o7777
        except ValueError:
            raise SandboxConfigError("permissions %r are not an octal mode" % permissions) from None
    raise SandboxConfigError("permissions must be a mode (0o644), not %s" % type(permissions).__name__)


def _group_name(group: Any) -> Optional[str]:
    if group is None:
        return None
    return str(getattr(group, "name", group))


class _Entry:
    type = ""

    def __init__(self, *, description: Optional[str] = None, ephemeral: bool = False, group: Any = None,
                 permissions: Any = None) -> None:
        self.description = description
        self.ephemeral = ephemeral
        self.group = group
        self.permissions = permissions

    def _common(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"type": self.type}
        mode = _mode_of(self.permissions)
        if mode is not None:
            out["mode"] = "%04o" % mode
        if self.description is not None:
            out["description"] = self.description
        if self.ephemeral:
            out["ephemeral"] = True
        if self.group is not None:
            out["group"] = _group_name(self.group)
        return out
