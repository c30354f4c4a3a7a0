"""Port forwards (docs/semantics.md, "Ports"): a sandbox's 127.0.0.1:PORT reached at a
loopback port of the server's machine, without a token."""

from typing import Any, Dict, List, Mapping, Optional

from ._http import Client


class PortForward:
    """``port`` inside the sandbox, reached at ``host``:``host_port`` (``url`` for HTTP)."""

    def __init__(self, doc: Mapping[str, Any]) -> None:
        self.raw: Dict[str, Any] = dict(doc)
        self.port = int(doc["port"])
        self.host = str(doc["host"])
        self.host_port = int(doc["host_port"])

    @property
    def url(self) -> str:
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "http://%s:%d" % (host, self.host_port)

    def __repr__(self) -> str:
        return "PortForward(%d -> %s:%d)" % (self.port, self.host, self.host_port)


class Ports:
    """``sandbox.ports``: expose, list, close."""

    def __init__(self, client: Client, base: str) -> None:
        self._client = client
        self._base = base + "/ports"

    def expose(self, port: int, *, host: Optional[str] = None, host_port: int = 0) -> PortForward:
        """The forward of ``port`` (made now, or the one already there): ``host`` a
        loopback address of the server's machine (default 127.0.0.1), ``host_port`` 0 for
        a free one."""
        body: Dict[str, Any] = {"port": int(port)}
        if host is not None:
            body["host"] = host
        if host_port:
            body["host_port"] = int(host_port)
        return PortForward(self._client.json("POST", self._base, json_body=body))

    def list(self) -> List[PortForward]:
        return [PortForward(p) for p in self._client.json("GET", self._base)["ports"]]

    def close(self, port: int) -> None:
        """Stops forwarding ``port`` (NotFoundError when it is not); connections already
        made go on."""
        self._client.json("DELETE", "%s/%d" % (self._base, int(port)))
