"""Cells and commands: one document, or a stream of NDJSON events to callbacks."""
from __future__ import annotations

import base64
import contextlib
import os
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Union

from ._http import Client
from .errors import ProtocolError
from .models import CommandResult, Execution

__all__ = ["Commands"]

TextCallback = Callable[[str], Any]
ProgressCallback = Callable[[str, Optional[str]], Any]
DisplayCallback = Callable[[Dict[str, Any]], Any]

# The server's own default deadline of cells and commands.
DEFAULT_RUN_TIMEOUT_S = 180.0
# How long past a cell's or command's deadline an answer may take (the watchdog
# interrupts, then restarts the kernel; the answer follows).
_RUN_GRACE_S = 60.0


def _text_event(event: Dict[str, Any]) -> str:
    text = event.get("text")
    if isinstance(text, str):
        return text
    b64 = event.get("text_b64")
    if isinstance(b64, str):
        return base64.b64decode(b64).decode("utf-8", "replace")
    return ""


def _bytes_field(body: Dict[str, Any], name: str, value: Union[str, bytes]) -> None:
    """``name`` when the bytes are UTF-8 text, else ``name_b64``."""
    if isinstance(value, str):
        body[name] = value
        return
    try:
        body[name] = bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        body[name + "_b64"] = base64.b64encode(bytes(value)).decode("ascii")


def _run_wait(timeout: Optional[float], request_timeout: Optional[float]) -> float:
    if request_timeout is not None:
        return request_timeout
    return (DEFAULT_RUN_TIMEOUT_S if timeout is None else float(timeout)) + _RUN_GRACE_S


class _Runner:
    """Cells and commands of one sandbox (or one session's sandbox), at ``base``."""

    def __init__(self, client: Client, base: str) -> None:
        self._client = client
        self._base = base

    def run_code(
        self,
        code: Union[str, bytes],
        timeout: Optional[float] = None,
        *,
        on_stdout: Optional[TextCallback] = None,
        on_stderr: Optional[TextCallback] = None,
        on_progress: Optional[ProgressCallback] = None,
        on_display: Optional[DisplayCallback] = None,
        output_limit: Optional[int] = None,
        stream: Optional[bool] = None,
        request_timeout: Optional[float] = None,
    ) -> Execution:
        body: Dict[str, Any] = {}
        _bytes_field(body, "code", code)
        if timeout is not None:
            body["timeout_s"] = timeout
        if output_limit is not None:
            body["output_limit"] = output_limit
        handlers: Dict[str, Callable[[Dict[str, Any]], Any]] = {}
        if on_stdout is not None:
            handlers["stdout"] = lambda e: on_stdout(_text_event(e))
        if on_stderr is not None:
            handlers["stderr"] = lambda e: on_stderr(_text_event(e))
        if on_progress is not None:
            handlers["progress"] = lambda e: on_progress(
                str(e.get("step", "")), e.get("metric") if isinstance(e.get("metric"), str) else None)
        if on_display is not None:
            handlers["display"] = lambda e: on_display(e["item"]) if isinstance(e.get("item"), dict) else None
        # A client that leaves the stream leaves the cell running (its state is kept).
        return self._post("cells", body, _run_wait(timeout, request_timeout), stream, handlers, Execution)

    def run_command(
        self,
        cmd: Union[str, Sequence[str]],
        timeout: Optional[float] = None,
        *,
        on_stdout: Optional[TextCallback] = None,
        on_stderr: Optional[TextCallback] = None,
        stdin: Union[None, str, bytes] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        run_as: Optional[str] = None,
        stream: Optional[bool] = None,
        request_timeout: Optional[float] = None,
    ) -> CommandResult:
        body: Dict[str, Any] = {}
        if isinstance(cmd, str):
            body["command"] = cmd
        else:
            argv = [os.fspath(a) if isinstance(a, os.PathLike) else str(a) for a in cmd]
            if not argv:
                raise ValueError("an empty argv")
            body["argv"] = argv
        if timeout is not None:
            body["timeout_s"] = timeout
        if env is not None:
            body["env"] = {str(k): str(v) for k, v in env.items()}
        if cwd is not None:
            body["cwd"] = cwd
        if run_as is not None:
            body["run_as"] = run_as
        if stdin is not None:
            _bytes_field(body, "stdin", stdin)
        handlers: Dict[str, Callable[[Dict[str, Any]], Any]] = {}
        if on_stdout is not None:
            handlers["stdout"] = lambda e: on_stdout(_text_event(e))
        if on_stderr is not None:
            handlers["stderr"] = lambda e: on_stderr(_text_event(e))
        # A client that leaves the stream has the server kill the command.
        return self._post("commands", body, _run_wait(timeout, request_timeout), stream, handlers, CommandResult)

    def _post(self, what: str, body: Dict[str, Any], wait: float, stream: Optional[bool],
              handlers: Dict[str, Callable[[Dict[str, Any]], Any]], result: Callable[[Dict[str, Any]], Any]) -> Any:
        """POSTs to ``base/what`` (cells, commands): the result document, or — with
        ``stream``, by default when there are handlers — the NDJSON events, each to
        ``handlers[type]``, until the result."""
        path = self._base + "/" + what
        if stream is None:
            stream = bool(handlers)
        if not stream:
            return result(self._client.json("POST", path, json_body=body, timeout=wait))
        # Closed here, in this thread, however the loop ends: a handler that raises leaves
        # the stream (the connection is dropped).
        with contextlib.closing(self._client.events(path, body, first_timeout=wait)) as events:
            for event in events:
                kind = event.get("type")
                if kind == "result":
                    return result(event)
                handler = handlers.get(kind)
                if handler is not None:
                    handler(event)
        raise ProtocolError("the %s's stream ended without a result" % what[:-1])


class Commands:
    """``sbx.commands.run(...)``: the agent's bash tool."""

    def __init__(self, runner: _Runner) -> None:
        self._runner = runner

    def run(
        self,
        cmd: Union[str, Sequence[str]],
        timeout: Optional[float] = None,
        *,
        on_stdout: Optional[TextCallback] = None,
        on_stderr: Optional[TextCallback] = None,
        stdin: Union[None, str, bytes] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        run_as: Optional[str] = None,
        stream: Optional[bool] = None,
        request_timeout: Optional[float] = None,
    ) -> CommandResult:
        """Runs a command in the sandbox and returns its result (a non-zero exit or a
        deadline is a result, not an exception).

        ``cmd`` a string runs ``/bin/bash -c cmd``; a list runs that program (found on
        ``PATH``) with those arguments. ``timeout`` is the deadline in seconds (the
        server's default 180 s when None): at it the command's process group is killed
        and the result says ``status == "timeout"``. ``on_stdout``/``on_stderr`` receive
        the output as text while it runs (the result keeps the exact bytes). ``stdin``
        is written to its standard input (else it reads /dev/null). ``run_as`` is one of
        the sandbox's ``users`` (default: the sandbox user; an unknown name is NotFound).
        ``stream`` forces or forbids streaming (default: stream when a callback is given);
        ``request_timeout`` bounds the wait for a non-streamed answer (default: the
        deadline plus 60 s).
        """
        return self._runner.run_command(cmd, timeout, on_stdout=on_stdout, on_stderr=on_stderr, stdin=stdin,
                                        env=env, cwd=cwd, run_as=run_as, stream=stream,
                                        request_timeout=request_timeout)
