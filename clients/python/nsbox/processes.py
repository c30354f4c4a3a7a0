"""Processes that outlive a request (docs/semantics.md, "Processes"): started in a
sandbox, named by their pid there, read from byte offsets while they run and after."""

import base64
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from ._http import Client, next_event
from .errors import ProtocolError, error_from_document

_FOLLOW_SLACK_S = 30.0  # a followed answer's wait beyond its own timeout_s


class ProcessStatus:
    """One process: ``pid``, ``argv``, ``cwd``, ``run_as`` (the account it runs as; None
    for the sandbox user), ``tty``, ``status`` ("running" or
    "exited"), ``exit_code`` (None while it runs; 128+N when signal N ended it),
    ``signal`` (its name, or None), ``stdout_bytes``, ``stderr_bytes`` and the spill
    files' paths once a stream outgrew 128 KiB (``stdout_file_path``)."""

    def __init__(self, doc: Mapping[str, Any]) -> None:
        self.raw = dict(doc)
        self.pid = int(doc.get("pid", 0))
        self.argv = list(doc.get("argv", []))
        self.cwd = doc.get("cwd")
        self.run_as = doc.get("run_as")
        self.tty = bool(doc.get("tty", False))
        self.status = doc.get("status")
        self.exit_code = doc.get("exit_code")
        self.signal = doc.get("signal")
        self.stdout_bytes = int(doc.get("stdout_bytes", 0))
        self.stderr_bytes = int(doc.get("stderr_bytes", 0))
        self.stdout_file_path = doc.get("stdout_file_path")
        self.stderr_file_path = doc.get("stderr_file_path")

    @property
    def running(self) -> bool:
        return self.status == "running"

    def __repr__(self) -> str:
        return "ProcessStatus(pid=%d, status=%r, exit_code=%r)" % (self.pid, self.status, self.exit_code)


class ProcessChunk:
    """Bytes of one stream ("stdout" or "stderr") from ``offset``; ``skipped`` bytes
    before it were kept nowhere."""

    def __init__(self, event: Mapping[str, Any]) -> None:
        self.stream = event["type"]
        self.offset = int(event.get("offset", 0))
        if "text_b64" in event:
            self.data = base64.b64decode(event["text_b64"])
        else:
            self.data = str(event.get("text", "")).encode("utf-8")
        self.skipped = int(event.get("skipped", 0))

    def __repr__(self) -> str:
        return "ProcessChunk(%s, offset=%d, %d bytes)" % (self.stream, self.offset, len(self.data))


class ProcessOutput:
    """What one read gave: the bytes of each stream (``stdout``, ``stderr``), the
    process's status at its end (``end``, a ProcessStatus), and the offsets to go on
    from (``offset``, ``stderr_offset``)."""

    def __init__(self, chunks: List[ProcessChunk], end: Mapping[str, Any]) -> None:
        self.chunks = chunks
        self.stdout = b"".join(c.data for c in chunks if c.stream == "stdout")
        self.stderr = b"".join(c.data for c in chunks if c.stream == "stderr")
        self.skipped = sum(c.skipped for c in chunks)
        self.end = ProcessStatus(end)
        self.offset = int(end.get("offset", 0))
        self.stderr_offset = int(end.get("stderr_offset", 0))


def command_body(command: Union[str, Sequence[str]], env: Optional[Mapping[str, str]],
                 cwd: Optional[str], run_as: Optional[str] = None) -> Dict[str, Any]:
    """A request's command (a bash line or an argv list), env, cwd and account, as the API
    takes them."""
    body: Dict[str, Any] = {}
    if isinstance(command, str):
        body["command"] = command
    else:
        body["argv"] = [str(a) for a in command]
    if env:
        body["env"] = {str(k): str(v) for k, v in env.items()}
    if cwd is not None:
        body["cwd"] = cwd
    if run_as is not None:
        body["run_as"] = run_as
    return body


class Processes:
    """``sandbox.processes``: start, list, output, input, signal, kill."""

    def __init__(self, client: Client, base: str) -> None:
        self._client = client
        self._base = base + "/processes"

    def start(self, command: Union[str, Sequence[str]], *, env: Optional[Mapping[str, str]] = None,
              cwd: Optional[str] = None, tty: bool = False, cols: int = 80, rows: int = 24,
              run_as: Optional[str] = None) -> int:
        """Starts ``command`` (a bash line, or an argv list); its pid in the sandbox, once it
        runs. It runs on after this client and its server are gone. ``run_as`` one of the
        sandbox's ``users`` (default: the sandbox user)."""
        body = command_body(command, env, cwd, run_as)
        if tty:
            body.update({"tty": True, "cols": int(cols), "rows": int(rows)})
        return int(self._client.json("POST", self._base, json_body=body)["pid"])

    def list(self) -> List[ProcessStatus]:
        return [ProcessStatus(p) for p in self._client.json("GET", self._base)["processes"]]

    def get(self, pid: int) -> ProcessStatus:
        """One process's status (NotFoundError when the sandbox has no such process)."""
        return self.output(pid, follow=False, offset=1 << 62, stderr_offset=1 << 62).end

    def stream(self, pid: int, *, offset: int = 0, stderr_offset: int = 0, follow: bool = True,
               timeout_s: int = 300) -> Iterator[Union[ProcessChunk, ProcessStatus]]:
        """The output as it comes: ProcessChunks, then the ProcessStatus at the end (with
        ``raw["offset"]``/``raw["stderr_offset"]`` to go on from). Stopping early closes the
        connection; the process runs on."""
        query = {"offset": int(offset), "stderr_offset": int(stderr_offset), "follow": "true" if follow else "false",
                 "timeout_s": int(timeout_s)}
        answer = self._client.open("GET", "%s/%d/output" % (self._base, pid), query=query,
                                   headers={"Accept": "application/x-ndjson"}, timeout=timeout_s + _FOLLOW_SLACK_S)
        finished = False
        try:
            for event in _events(answer):
                if event.get("type") == "end":
                    finished = True
                    answer.finish()
                    yield ProcessStatus(event)
                    return
                yield ProcessChunk(event)
            raise ProtocolError("the output of process %d ended without an end line" % pid)
        finally:
            if not finished:
                answer.abandon()
            answer.close()

    def output(self, pid: int, *, offset: int = 0, stderr_offset: int = 0, follow: bool = False,
               timeout_s: int = 300) -> ProcessOutput:
        """The output from the offsets: what there is now, or (``follow``) until the process
        ended or ``timeout_s`` passed."""
        chunks: List[ProcessChunk] = []
        end: Dict[str, Any] = {}
        for item in self.stream(pid, offset=offset, stderr_offset=stderr_offset, follow=follow, timeout_s=timeout_s):
            if isinstance(item, ProcessChunk):
                chunks.append(item)
            else:
                end = item.raw
        return ProcessOutput(chunks, end)

    def wait(self, pid: int, *, timeout_s: int = 300) -> ProcessStatus:
        """Waits (at most ``timeout_s``) for the process to end; its status then."""
        out = self.output(pid, offset=1 << 62, stderr_offset=1 << 62, follow=True, timeout_s=timeout_s)
        return out.end

    def input(self, pid: int, data: Union[str, bytes], *, eof: bool = False) -> int:
        """Writes ``data`` to its stdin (or terminal); ``eof`` closes stdin after it. The
        bytes taken."""
        body: Dict[str, Any] = {"eof": bool(eof)}
        if isinstance(data, bytes):
            body["data_b64"] = base64.b64encode(data).decode("ascii")
        else:
            body["data"] = data
        return int(self._client.json("POST", "%s/%d/input" % (self._base, pid), json_body=body)["accepted"])

    def signal(self, pid: int, signal: Union[str, int] = "TERM") -> None:
        """Sends ``signal`` (a name like "TERM", "KILL", "INT", or a number) to its process group."""
        self._client.json("POST", "%s/%d/signal" % (self._base, pid), json_body={"signal": signal})

    def kill(self, pid: int) -> None:
        """Kills it (SIGKILL to its process group) if it runs, and removes it."""
        self._client.json("DELETE", "%s/%d" % (self._base, pid))


def _events(answer: Any) -> Iterator[Dict[str, Any]]:
    while True:
        event = next_event(answer)
        if event is None:
            return
        kind = event.get("type")
        if kind == "heartbeat":
            continue
        if kind == "error":
            raise error_from_document(event.get("error"), 200)
        yield event
