"""The SDK's sandbox client on nsbox: create, delete, resume (options and session state
are in state.py)."""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence

from .._http import Client
from ..errors import InvalidArgument, NotFound, NsboxError
from ..sandbox import Sandbox, make_client
from .errors import MountConfigError, SandboxConfigError, WorkspaceStartError
from .local_sources import LocalSources
from .manifest import Manifest, _resolve_env
from .session import NsboxSandboxSession
from .snapshots import restorable, snapshot_state
from .state import NsboxSandboxClientOptions, NsboxSandboxSessionState
from .types import _run


async def _make_with_sources(make: Any, manifest: Manifest, mounts: Sequence[Dict[str, Any]], *,
                             only_ephemeral: bool) -> Sandbox:
    """``make()``'s sandbox with the manifest's host sources copied in: checked (and
    repositories cloned) before anything is made; a failure removes the sandbox. The
    mounts' credentials are dropped from the request documents whatever happens."""
    sources = await _run(LocalSources.prepare, manifest.entries, None, [g.path for g in manifest.extra_path_grants],
                         only_ephemeral)
    try:
        try:
            sandbox = await _run(make)
        finally:
            for m in mounts:
                m.pop("credentials", None)
        if sources.items:
            try:
                await _run(sources.write, sandbox)
            except BaseException:
                await _run(sandbox.remove)  # nothing is left of a create that failed
                raise
        return sandbox
    finally:
        sources.close()


class NsboxSandboxClient:
    """The SDK's sandbox client on an `nsbox serve` (connection as for
    :class:`nsbox.Client`: arguments, NSBOX_URL / NSBOX_SOCKET, the default socket)."""

    backend_id = "nsbox"
    supports_default_options = True

    def __init__(self, client: Optional[Client] = None, *, url: Optional[str] = None, token: Optional[str] = None,
                 socket: Optional[str] = None, token_file: Optional[str] = None,
                 timeout: Optional[float] = None) -> None:
        self._client = make_client(client, url=url, token=token, socket=socket, token_file=token_file, timeout=timeout)
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
        """A new sandbox with the manifest's files, directories, environment and mounts
        (made by the server before it answers). Everything is checked before anything
        is made."""
        snapshot_doc = snapshot_state(snapshot)
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
                                  manifest=workspace if workspace["entries"] else None, client=self._client)

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
        state = NsboxSandboxSessionState(sandbox_id=sandbox.id, manifest=manifest, options=opts)
        state.snapshot = snapshot_doc
        return NsboxSandboxSession(sandbox, state, server_features=self._server_features)

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
        have the same mount topology. A sandbox that is gone raises WorkspaceStartError
        (recreating from a snapshot comes with nsbox's snapshots)."""
        if isinstance(state, Mapping):
            state = self.deserialize_session_state(state)
        if not isinstance(state, NsboxSandboxSessionState):
            raise SandboxConfigError("resume takes an nsbox session state")
        if manifest is not None:
            if manifest.root.rstrip("/") != state.manifest.root.rstrip("/") or \
                    manifest.mount_topology() != state.manifest.mount_topology():
                raise MountConfigError(
                    message="sandbox mount configuration can be rebound only from a current trusted mount "
                            "configuration with exactly matching credential-free topology")
        snapshot_id = restorable(state.snapshot)
        try:
            sandbox = await _run(Sandbox.connect, state.sandbox_id, client=self._client)
        except NotFound as e:
            if snapshot_id is None:
                raise WorkspaceStartError(message="sandbox %s no longer exists and has no snapshot; it cannot be resumed"
                                          % state.sandbox_id, context={"sandbox_id": state.sandbox_id}, cause=e) from e
            sandbox = await self._recreate(state, snapshot_id, manifest)
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
        return NsboxSandboxSession(sandbox, state, server_features=self._server_features)

    async def _recreate(self, state: NsboxSandboxSessionState, snapshot_id: str, manifest: Optional[Manifest]) -> Sandbox:
        """A new sandbox for a state whose sandbox is gone, hydrated from its snapshot before
        its first command; mounts (ephemeral) come again from the trusted manifest."""
        trusted = manifest if manifest is not None else state.manifest
        mounts = trusted.mounts_request()
        ephemeral = trusted.ephemeral_request()
        env = await _resolve_env(trusted.environment)
        env.update(state.options.env)
        opts = state.options

        def make() -> Sandbox:
            return Sandbox.create(size=opts.size, env=env or None, net=opts.net, mounts=mounts or None,
                                  files_quota=opts.files_quota, from_snapshot=snapshot_id,
                                  lazy_kernel=bool(opts.lazy_kernel), manifest=ephemeral if ephemeral["entries"] else None, client=self._client)

        def made() -> Sandbox:
            try:
                return make()
            except NsboxError as e:
                raise WorkspaceStartError(message="sandbox %s is gone and its snapshot %s did not restore: %s"
                                          % (state.sandbox_id, snapshot_id, e),
                                          context={"sandbox_id": state.sandbox_id, "snapshot_id": snapshot_id}, cause=e) from e

        # Ephemeral host sources are copied again too (the snapshot never holds them).
        sandbox = await _make_with_sources(made, trusted, mounts, only_ephemeral=True)
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
