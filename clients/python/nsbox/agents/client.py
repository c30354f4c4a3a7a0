"""The SDK's sandbox client on nsbox: create, delete, resume (options and session state
are in state.py, snapshot specs in snapshots.py)."""
from __future__ import annotations

import base64
import uuid
from typing import Any, Awaitable, Callable, Dict, Mapping, Optional, Sequence

from .._http import Client
from ..errors import InvalidArgument, NotFound, NsboxError
from ..sandbox import Sandbox, make_client
from .errors import MountConfigError, SandboxConfigError, SnapshotError, WorkspaceStartError
from .local_sources import LocalSources
from .manifest import Manifest, _resolve_env
from .session import NsboxSandboxSession
from .snapshots import remote_client, restore, server_snapshot, snapshot_state
from .state import NsboxSandboxClientOptions, NsboxSandboxSessionState
from .types import _run


async def _make_with_sources(make: Any, manifest: Manifest, mounts: Sequence[Dict[str, Any]], *,
                             only_ephemeral: bool,
                             fill: Optional[Callable[[Sandbox], Awaitable[None]]] = None) -> Sandbox:
    """``make()``'s sandbox, ``fill``ed, with the manifest's host sources copied in: checked
    (and repositories cloned) before anything is made; a failure removes the sandbox. The
    mounts' credentials are dropped from the request documents whatever happens."""
    sources = await _run(LocalSources.prepare, manifest.entries, str(manifest.root_path),
                         grants=[g.path for g in manifest.extra_path_grants], only_ephemeral=only_ephemeral)
    try:
        try:
            sandbox = await _run(make)
        finally:
            for m in mounts:
                m.pop("credentials", None)
        try:
            if fill is not None:
                await fill(sandbox)
            if sources.items:
                await _run(sources.write, sandbox)
        except BaseException:
            await _run(sandbox.remove)  # nothing is left of a create that failed
            raise
        return sandbox
    finally:
        sources.close()


def _write_entries(sandbox: Sandbox, directory: str, entries: Mapping[str, Any], ephemeral: bool = False) -> None:
    """Makes the ephemeral entries of a manifest request through the fs API, under the
    directories that hold them (those are in the archive and keep its modes). A host
    source's placeholder is an empty file or a directory, which LocalSources then fills."""
    for name, entry in entries.items():
        target = directory.rstrip("/") + "/" + name
        mode = int(entry["mode"], 8) if "mode" in entry else None
        made = ephemeral or bool(entry.get("ephemeral"))
        if entry.get("type") == "dir":
            sandbox.fs.mkdir(target, parents=True)
            if made and mode is not None:  # the fs API makes directories 0755
                r = sandbox.commands.run(["chmod", "%04o" % mode, "--", target], 30)
                if r.exit_code != 0:
                    raise WorkspaceStartError(message="chmod %04o %s: %s" % (mode, target, r.stderr_text.strip()),
                                              context={"path": target})
            _write_entries(sandbox, target, entry.get("children") or {}, made)
        else:
            data = base64.b64decode(entry["content_b64"]) if "content_b64" in entry else \
                str(entry.get("content", "")).encode("utf-8")
            sandbox.fs.write(target, data, mode=0o755 if mode is None else mode)  # the manifest's default, the SDK's


class NsboxSandboxClient:
    """The SDK's sandbox client on an `nsbox serve` (connection as for
    :class:`nsbox.Client`: arguments, NSBOX_URL / NSBOX_SOCKET, the default socket)."""

    backend_id = "nsbox"
    supports_default_options = True

    def __init__(self, client: Optional[Client] = None, *, url: Optional[str] = None, token: Optional[str] = None,
                 socket: Optional[str] = None, token_file: Optional[str] = None,
                 timeout: Optional[float] = None, dependencies: Any = None) -> None:
        """``dependencies``: the clients of remote snapshot specs by key (a mapping, or the
        SDK's Dependencies)."""
        self._client = make_client(client, url=url, token=token, socket=socket, token_file=token_file, timeout=timeout)
        self._dependencies = dependencies
        self._features: Optional[Dict[str, Any]] = None

    @property
    def client(self) -> Client:
        return self._client

    def _server_features(self) -> Dict[str, Any]:
        if self._features is None:
            try:
                info = self._client.json("GET", "/v1/info")
                features = info.get("features") if isinstance(info, dict) else None
                self._features = dict(features) if isinstance(features, dict) else {}
            except NsboxError:
                return {}
        return self._features

    async def create(self, *, snapshot: Any = None, manifest: Any = None, options: Any = None) -> "NsboxSandboxSession":
        """A new sandbox whose workspace root is the manifest's ``root``, with its files,
        directories, environment and mounts (made by the server before it answers).
        Everything is checked before anything is made."""
        session_id = uuid.uuid4().hex
        snapshot_doc = snapshot_state(snapshot, session_id)
        if snapshot_doc["type"] == "remote":
            await remote_client(self._dependencies, snapshot_doc["client_dependency_key"])
        if manifest is None:
            manifest = Manifest()
        elif isinstance(manifest, Mapping):
            manifest = Manifest.model_validate(manifest)
        elif not isinstance(manifest, Manifest):
            raise SandboxConfigError("manifest must be an nsbox.agents.Manifest or its dict form")
        opts = NsboxSandboxClientOptions.parse(options)
        manifest.validate()
        workspace = manifest.workspace_request()
        mounts = manifest.mounts_request()
        env = await _resolve_env(manifest.environment)
        env.update(opts.env)

        def make() -> Sandbox:
            return Sandbox.create(size=opts.size, name=opts.name, env=env or None, net=opts.net, mounts=mounts or None,
                                  files_quota=opts.files_quota, volume=opts.volume, lazy_kernel=bool(opts.lazy_kernel),
                                  manifest=workspace if workspace["entries"] else None,
                                  workspace_root=workspace["root"], client=self._client)

        def made() -> Sandbox:
            try:
                return make()
            except InvalidArgument as e:
                raise SandboxConfigError("nsbox refused the sandbox: %s" % e.message, op="start") from e
            except NsboxError as e:  # a mount that could not be made, a full disk...: the server's words
                raise WorkspaceStartError(message="nsbox could not make the sandbox: %s" % e.message,
                                          context={"code": e.code}, cause=e) from e

        sandbox = await _make_with_sources(made, manifest, mounts, only_ephemeral=False)
        await _run(self._server_features)
        state = NsboxSandboxSessionState(sandbox_id=sandbox.id, manifest=manifest, options=opts, session_id=session_id)
        state.snapshot = snapshot_doc
        return self._session(sandbox, state)

    def _session(self, sandbox: Sandbox, state: NsboxSandboxSessionState) -> NsboxSandboxSession:
        return NsboxSandboxSession(sandbox, state, server_features=self._server_features, dependencies=self._dependencies)

    async def delete(self, session: "NsboxSandboxSession") -> "NsboxSandboxSession":
        """Removes the session's sandbox (and its files volume, unless named)."""
        try:
            await _run(session.sandbox.remove)
        except NotFound:
            pass
        session._deleted = True
        return session

    async def resume(self, state: Any, *, manifest: Optional[Manifest] = None) -> "NsboxSandboxSession":
        """Reattaches to the live sandbox of ``state`` (from
        :meth:`deserialize_session_state`). Its mounts are still served from the host, so
        no credential is needed again; a ``manifest`` given (the current trusted one) must
        have the same root and mount topology. A sandbox that is gone is made again from the
        state's snapshot (its workspace archive); without one, WorkspaceStartError."""
        if isinstance(state, Mapping):
            state = self.deserialize_session_state(state)
        if not isinstance(state, NsboxSandboxSessionState):
            raise SandboxConfigError("resume takes an nsbox session state")
        if manifest is not None:
            if manifest.root_path != state.manifest.root_path or \
                    manifest.mount_topology() != state.manifest.mount_topology():
                raise MountConfigError(
                    message="sandbox mount configuration can be rebound only from a current trusted mount "
                            "configuration with exactly matching credential-free topology")
        try:
            sandbox = await _run(Sandbox.connect, state.sandbox_id, client=self._client)
        except NotFound as e:
            if state.snapshot.get("type") in (None, "noop"):
                raise WorkspaceStartError(message="sandbox %s no longer exists and has no snapshot; it cannot be resumed"
                                          % state.sandbox_id, context={"sandbox_id": state.sandbox_id}, cause=e) from e
            sandbox = await self._recreate(state, manifest)
        else:
            if sandbox.last_info.status != "running":
                # Stopped or dead: the same sandbox again, its files kept (a fresh kernel).
                env = await _resolve_env(state.manifest.environment)
                env.update(state.options.env)
                try:
                    await _run(sandbox.start, env or None)
                except NsboxError as e:
                    raise WorkspaceStartError(message="sandbox %s is %s and did not start again: %s"
                                              % (state.sandbox_id, sandbox.last_info.status, e),
                                              context={"sandbox_id": state.sandbox_id}, cause=e) from e
        await _run(self._server_features)
        return self._session(sandbox, state)

    async def _recreate(self, state: NsboxSandboxSessionState, manifest: Optional[Manifest]) -> Sandbox:
        """A new sandbox for a state whose sandbox is gone: made with the trusted manifest's
        mounts and ephemeral entries (so that the server serves the one and leaves the
        other out of the next archive), its workspace replaced by the snapshot's archive,
        then the ephemeral entries made again (the replace removed them)."""
        trusted = manifest if manifest is not None else state.manifest
        legacy = server_snapshot(state.snapshot)  # a state from before workspace archives
        archive: Any = None
        if legacy is None:
            try:
                archive = await restore(state.snapshot, self._dependencies)
            except SnapshotError as e:
                raise WorkspaceStartError(message="sandbox %s no longer exists and its snapshot cannot be restored: %s"
                                          % (state.sandbox_id, e.context.get("reason", e)),
                                          context={"sandbox_id": state.sandbox_id, **e.context}, cause=e) from e
        mounts = trusted.mounts_request()
        ephemeral = trusted.ephemeral_request()
        env = await _resolve_env(trusted.environment)
        env.update(state.options.env)
        opts = state.options

        def make() -> Sandbox:
            return Sandbox.create(size=opts.size, env=env or None, net=opts.net, mounts=mounts or None,
                                  files_quota=opts.files_quota, from_snapshot=legacy, lazy_kernel=bool(opts.lazy_kernel),
                                  manifest=ephemeral if ephemeral["entries"] else None,
                                  workspace_root=ephemeral["root"], client=self._client)

        def made() -> Sandbox:
            try:
                return make()
            except NsboxError as e:
                raise WorkspaceStartError(message="sandbox %s is gone and could not be made again: %s" % (state.sandbox_id, e),
                                          context={"sandbox_id": state.sandbox_id, "snapshot": dict(state.snapshot)},
                                          cause=e) from e

        async def fill(sandbox: Sandbox) -> None:
            try:
                await _run(sandbox.replace_workspace, archive)
            except NsboxError as e:
                raise WorkspaceStartError(message="sandbox %s is gone and its snapshot %s did not restore: %s"
                                          % (state.sandbox_id, state.snapshot.get("id"), e),
                                          context={"sandbox_id": state.sandbox_id, "code": e.code}, cause=e) from e
            await _run(_write_entries, sandbox, ephemeral["root"], ephemeral["entries"])

        try:
            # Ephemeral host sources are copied again too (the archive never holds them).
            sandbox = await _make_with_sources(made, trusted, mounts, only_ephemeral=True,
                                               fill=None if archive is None else fill)
        finally:
            if hasattr(archive, "close"):
                archive.close()
        state.sandbox_id = sandbox.id
        return sandbox

    def serialize_session_state(self, state: NsboxSandboxSessionState) -> Dict[str, object]:
        """A JSON-compatible document of the state: no token, no mount credential, no
        environment value."""
        return state.to_dict()

    def deserialize_session_state(self, payload: Mapping[str, object]) -> NsboxSandboxSessionState:
        return NsboxSandboxSessionState.from_dict(payload)

    async def aclose(self) -> None:
        self._client.close()

    close = aclose
