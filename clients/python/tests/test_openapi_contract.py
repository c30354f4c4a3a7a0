"""A real server's answers against the HTTP API's contract, api/openapi.yaml.

Each request goes over the loopback port as plain HTTP (no client library between), and
each answer is checked against the document: its status must be one the operation lists
(not just `default`), its content type one that status documents, and its JSON body (or
each line of an NDJSON stream) must validate against the schema (JSON Schema 2020-12,
Debian's python3-jsonschema; the schemas close the shapes with additionalProperties or
unevaluatedProperties, so a field the server adds without documenting it fails here).
The JSON bodies the tests send are checked against the documented request schemas too.
The operation is found from the request's path, so a route the document lacks fails.
"""
from __future__ import annotations

import http.client
import io
import json
import os
import re
import tarfile
import threading
import time
import urllib.parse
from typing import Any, Dict, Iterator, List, Optional, Tuple

import jsonschema
import pytest
import yaml

from conftest import REPO, Server

DOCUMENT = os.path.join(REPO, "api", "openapi.yaml")
METHODS = ("get", "put", "post", "patch", "delete")


def _pointer_part(text: str) -> str:
    return text.replace("~", "~0").replace("/", "~1")


class Contract:
    """api/openapi.yaml, and checks of answers and request bodies against it."""

    def __init__(self, path: str) -> None:
        with open(path) as f:
            self.doc: Dict[str, Any] = yaml.safe_load(f)
        self.templates = [(p, re.compile("^" + re.sub(r"\\{[^/]+\\}", "[^/]+", re.escape(p)) + "$"))
                          for p in self.doc["paths"]]

    def resolve(self, pointer: str) -> Any:
        node: Any = self.doc
        for part in pointer.lstrip("#/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def template(self, path: str) -> str:
        # A literal segment beats a parameter ({sid}/sandbox over a twin's {sid}/X).
        found = [p for p, rx in self.templates if rx.match(path)]
        assert found, "api/openapi.yaml has no path for %s" % path
        found.sort(key=lambda p: p.count("{"))
        return found[0]

    def operation(self, method: str, path: str) -> Tuple[str, Dict[str, Any]]:
        template = self.template(path)
        op = self.doc["paths"][template].get(method.lower())
        assert op is not None, "api/openapi.yaml has no %s %s" % (method, template)
        return "#/paths/%s/%s" % (_pointer_part(template), method.lower()), op

    def validate(self, pointer: str, instance: Any, what: str) -> None:
        # The schema is reached by a $ref from the document's root, so that its own $refs
        # resolve in the document.
        root = dict(self.doc)
        root["$ref"] = pointer
        errors = sorted(jsonschema.Draft202012Validator(root, format_checker=jsonschema.FormatChecker()).iter_errors(instance),
                        key=lambda e: list(e.absolute_path))
        if errors:
            best = jsonschema.exceptions.best_match(errors)
            raise AssertionError("%s does not match %s: %s at %s\n%s" % (
                what, pointer, best.message, "/".join(str(p) for p in best.absolute_path),
                json.dumps(instance, indent=1)[:4000]))

    def response(self, method: str, path: str, status: int) -> Tuple[str, Dict[str, Any]]:
        op_pointer, op = self.operation(method, path)
        responses = op["responses"]
        assert str(status) in responses, "%s %s answered %d, which api/openapi.yaml does not list (it lists %s)" % (
            method, path, status, sorted(responses))
        pointer = "%s/responses/%d" % (op_pointer, status)
        answer = responses[str(status)]
        if "$ref" in answer:
            pointer = answer["$ref"]
            answer = self.resolve(pointer)
        return pointer, answer

    def check_request(self, method: str, path: str, body: Any, valid: bool = True) -> None:
        """That the operation's request schema takes `body` (or, `valid` false, refuses it)."""
        op_pointer, op = self.operation(method, path)
        assert "requestBody" in op, "%s %s takes no body in api/openapi.yaml" % (method, path)
        assert "application/json" in op["requestBody"]["content"]
        pointer = op_pointer + "/requestBody/content/application~1json/schema"
        what = "the request body of %s %s" % (method, path)
        if valid:
            self.validate(pointer, body, what)
            return
        with pytest.raises(AssertionError):
            self.validate(pointer, body, what)

    def check(self, method: str, path: str, answer: "Answer") -> Any:
        """Checks an answer; returns its JSON body (a list of events for a stream)."""
        pointer, documented = self.response(method, path, answer.status)
        media = answer.content_type.split(";")[0].strip()
        content = documented.get("content", {})
        assert media in content, "%s %s answered %d as %s; api/openapi.yaml documents %s" % (
            method, path, answer.status, media, sorted(content))
        schema = "%s/content/%s/schema" % (pointer, _pointer_part(media))
        for name in documented.get("headers", {}):
            if name in ("Location", "WWW-Authenticate"):
                assert name.lower() in answer.headers, "%s %s answered %d without %s" % (method, path, answer.status, name)
        what = "the %d answer of %s %s" % (answer.status, method, path)
        if media == "application/json":
            doc = json.loads(answer.data)
            self.validate(schema, doc, what)
            return doc
        if media == "application/x-ndjson":
            events = [json.loads(line) for line in answer.data.split(b"\n") if line.strip()]
            assert events, what + " is an empty stream"
            for i, e in enumerate(events):
                self.validate(schema, e, "line %d of %s" % (i + 1, what))
            return events
        return answer.data

    def check_error(self, answer: "Answer", schema: str) -> Dict[str, Any]:
        """An answer to a request no operation documents (no endpoint, bad token)."""
        assert answer.content_type.startswith("application/json")
        doc = json.loads(answer.data)
        self.validate("#/components/schemas/" + schema, doc, "the %d answer" % answer.status)
        return doc  # type: ignore[no-any-return]


CONTRACT = Contract(DOCUMENT)


class Answer:
    def __init__(self, status: int, headers: Dict[str, str], data: bytes) -> None:
        self.status = status
        self.headers = headers  # lower-case names
        self.data = data

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")


class Api:
    """Plain HTTP/1.1 to the server's loopback port; each answer checked against the
    contract unless `raw`."""

    def __init__(self, server: Server) -> None:
        assert server.url is not None
        parsed = urllib.parse.urlsplit(server.url)
        self.host, self.port = parsed.hostname, parsed.port
        self.token = server.token

    def send(self, method: str, path: str, query: Optional[Dict[str, Any]] = None, body: Any = None,
             data: Optional[bytes] = None, headers: Optional[Dict[str, str]] = None, token: bool = True,
             timeout: float = 120) -> Answer:
        h = dict(headers or {})
        if token:
            h["Authorization"] = "Bearer %s" % self.token
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        target = path + ("?" + urllib.parse.urlencode(query) if query else "")
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)  # type: ignore[arg-type]
        try:
            conn.request(method, target, body=data if data is not None else (b"" if method in ("POST", "PUT", "PATCH") else None),
                         headers=h)
            r = conn.getresponse()
            return Answer(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        finally:
            conn.close()

    def call(self, method: str, path: str, expect: int, **kwargs: Any) -> Any:
        """A request whose answer must have status `expect` and match the contract. The
        JSON body of a request the server takes must match the documented request schema."""
        if kwargs.get("body") is not None and expect < 300:
            CONTRACT.check_request(method, path, kwargs["body"])
        answer = self.send(method, path, **kwargs)
        assert answer.status == expect, "%s %s: %d, not %d: %r" % (method, path, answer.status, expect, answer.data[:500])
        return CONTRACT.check(method, path, answer)

    def error(self, method: str, path: str, expect: int, code: str, **kwargs: Any) -> Dict[str, Any]:
        """A request the server refuses with `code`; a JSON body it refuses as malformed,
        the documented request schema refuses too."""
        doc = self.call(method, path, expect, **kwargs)
        assert doc["error"]["code"] == code, doc
        if code == "malformed_request" and kwargs.get("body") is not None:
            CONTRACT.check_request(method, path, kwargs["body"], valid=False)
        return doc  # type: ignore[no-any-return]


@pytest.fixture()
def api(server: Server) -> Api:
    return Api(server)


@pytest.fixture()
def sandbox_id(api: Api) -> Iterator[str]:
    made = api.call("POST", "/v1/sandboxes", 201, body={"env": {"COLOR": "blue"}})
    try:
        yield made["id"]
    finally:
        if api.send("DELETE", "/v1/sandboxes/" + made["id"]).status not in (200, 404):
            raise AssertionError("the sandbox %s could not be removed" % made["id"])


def test_the_document_is_well_formed() -> None:
    doc = CONTRACT.doc
    assert doc["openapi"].startswith("3.1")
    refs: List[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                # An unquoted comma in a flow mapping ({description: a, b}) ends the text
                # and makes " b" a key of no value, which YAML accepts without a word.
                assert v is not None or " " not in str(k), "api/openapi.yaml: a description was cut at a comma before %r" % k
                if k == "$ref" and isinstance(v, str):
                    refs.append(v)
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(doc)
    for ref in refs:
        CONTRACT.resolve(ref)  # raises when it points nowhere
    for name, schema in doc["components"]["schemas"].items():
        jsonschema.Draft202012Validator.check_schema(schema)
    ids = set()
    for path, item in doc["paths"].items():
        wanted = set(re.findall(r"{(\w+)}", path))
        declared = {(CONTRACT.resolve(p["$ref"]) if "$ref" in p else p)["name"] for p in item.get("parameters", [])}
        for method in METHODS:
            op = item.get(method)
            if op is None:
                continue
            where = "%s %s" % (method.upper(), path)
            assert op["operationId"] not in ids, where
            ids.add(op["operationId"])
            params = declared | {(CONTRACT.resolve(p["$ref"]) if "$ref" in p else p)["name"]
                                 for p in op.get("parameters", []) if (CONTRACT.resolve(p["$ref"]) if "$ref" in p else p)["in"] == "path"}
            assert wanted <= params, where + ": a path parameter is not declared"
            if op.get("security") != []:
                assert "401" in op["responses"], where + " needs a token but does not say 401"
                assert "default" in op["responses"], where + " has no default error"
            if path.startswith("/v1/sessions/{sid}/") and path != "/v1/sessions/{sid}/sandbox":
                twin = doc["paths"].get(path.replace("/v1/sessions/{sid}/", "/v1/sandboxes/{id}/"), {}).get(method)
                assert twin is not None, where + " is no sandbox route's twin"
                assert "400" in op["responses"], where + " does not say 400 (sandbox_disabled)"


def test_probes_metrics_info_and_the_token(api: Api) -> None:
    assert api.call("GET", "/livez", 200, token=False) == {"live": True}
    assert api.call("GET", "/readyz", 200, token=False) == {"ready": True}
    metrics = api.call("GET", "/metrics", 200, token=False)
    assert b"nsbox_ready 1" in metrics
    info = api.call("GET", "/v1/info", 200)
    assert info["api_version"] == 1 and info["features"]["pty"] is True and info["shard"] is None
    denied = api.send("GET", "/v1/info", token=False)
    assert denied.status == 401 and denied.headers.get("www-authenticate") == "Bearer"
    CONTRACT.check("GET", "/v1/info", denied)
    wrong = api.send("GET", "/v1/sandboxes", headers={"Authorization": "Bearer " + "x" * 43}, token=False)
    assert wrong.status == 401
    CONTRACT.check("GET", "/v1/sandboxes", wrong)


def test_a_path_that_is_no_route_or_has_another_method_is_404_no_endpoint(api: Api) -> None:
    for method, path in (("GET", "/v1/nothing"), ("DELETE", "/v1/info"), ("DELETE", "/v1/pool"), ("GET", "/v1/drain"),
                         ("POST", "/v1/snapshots/x"), ("GET", "/v1/sandboxes/x/cells"), ("POST", "/v1/sandboxes/x/fs:chmod")):
        answer = api.send(method, path)
        assert answer.status == 404, (method, path, answer.data)
        doc = CONTRACT.check_error(answer, "NotFoundError")
        assert doc["error"]["message"] == "no endpoint %s %s" % (method, path)
    # Without the token, nobody learns which paths are routes.
    assert api.send("GET", "/v1/nothing", token=False).status == 401
    assert api.send("POST", "/livez", token=False).status == 401


def test_the_warm_pool_and_the_drain_of_a_server_without_a_shard(api: Api) -> None:
    pool = api.call("GET", "/v1/pool", 200)
    assert "sizes" in pool
    api.call("PUT", "/v1/pool", 200, body={"sizes": {"standard": 0}})
    api.error("PUT", "/v1/pool", 400, "malformed_request", body={"sizes": {"standard": 0}, "extra": 1})
    api.error("PUT", "/v1/pool", 422, "invalid_argument", body={"sizes": {"huge": 1}})
    api.error("POST", "/v1/drain", 501, "unsupported")


def test_a_sandbox_from_create_to_remove(api: Api) -> None:
    made = api.call("POST", "/v1/sandboxes", 201, body={"name": "contract", "env": {"A": "1"}, "files_quota": "64M", "lazy_kernel": True,
                                                        "ttl_s": 3600})
    sid = made["id"]
    try:
        assert made["files_quota"] == 64 << 20 and made["home_size"] == 0 and made["from_snapshot"] == ""
        assert made["ttl_s"] == 3600 and made["lazy_kernel"] is True
        listed = api.call("GET", "/v1/sandboxes", 200)
        assert [s["id"] for s in listed["sandboxes"]] == [sid]
        api.call("GET", "/v1/sandboxes", 200, query={"all": "true"})
        assert api.call("GET", "/v1/sandboxes/contract", 200)["id"] == sid
        assert api.call("PATCH", "/v1/sandboxes/" + sid, 200, body={"size": "medium"})["size"] == "medium"
        api.error("PATCH", "/v1/sandboxes/" + sid, 422, "invalid_argument", body={"net": {"allow": ["pypi.org"]}})
        api.error("PATCH", "/v1/sandboxes/" + sid, 400, "malformed_request", body={})
        api.error("POST", "/v1/sandboxes", 409, "already_exists", body={"name": "contract"})
        stopped = api.call("POST", "/v1/sandboxes/%s/stop" % sid, 200)
        assert stopped["status"] == "stopped" and stopped["kernel_state_lost"] is True
        api.error("POST", "/v1/sandboxes/%s/commands" % sid, 409, "sandbox_dead", body={"command": "true"})
        api.error("POST", "/v1/sandboxes/%s/start" % sid, 422, "invalid_argument", body={})
        assert api.call("POST", "/v1/sandboxes/%s/start" % sid, 200, body={"env": {"A": "1"}})["status"] == "running"
        api.error("POST", "/v1/sandboxes/%s/start" % sid, 409, "busy", body={"env": {"A": "1"}})
        assert api.call("DELETE", "/v1/sandboxes/" + sid, 200) == {"removed": [sid]}
    finally:
        api.send("DELETE", "/v1/sandboxes/" + sid)
    api.error("GET", "/v1/sandboxes/" + sid, 404, "not_found")
    api.error("DELETE", "/v1/sandboxes/" + sid, 404, "not_found")


def test_a_create_the_server_refuses(api: Api) -> None:
    bad = api.send("POST", "/v1/sandboxes", data=b"{nope")
    assert bad.status == 400
    CONTRACT.check("POST", "/v1/sandboxes", bad)
    api.error("POST", "/v1/sandboxes", 400, "malformed_request", data=b"[1]")
    unknown = api.send("POST", "/v1/sandboxes", body={"bogus": 1})
    assert CONTRACT.check("POST", "/v1/sandboxes", unknown)["error"]["code"] == "malformed_request"
    api.error("POST", "/v1/sandboxes", 422, "invalid_argument", body={"size": "huge"})
    api.error("POST", "/v1/sandboxes", 422, "invalid_argument", body={"name": "sbx-taken"})
    api.error("POST", "/v1/sandboxes", 404, "not_found", body={"from_snapshot": "no-such-snapshot"})


def test_cells_answer_a_document_or_a_stream(api: Api, sandbox_id: str) -> None:
    base = "/v1/sandboxes/%s" % sandbox_id
    ok = api.call("POST", base + "/cells", 200, body={"code": "import os; print(os.environ['COLOR']); 6 * 7"})
    assert ok["status"] == "ok" and ok["results"] == "42" and ok["stdout"] == "blue\n"
    failed = api.call("POST", base + "/cells", 200, body={"code": "1/0"})
    assert failed["status"] == "error" and failed["error"]["ename"] == "ZeroDivisionError"
    late = api.call("POST", base + "/cells", 200, body={"code": "import time; time.sleep(5)", "timeout_s": 0.5})
    assert late["status"] in ("timeout", "interrupted"), late
    binary = api.call("POST", base + "/cells", 200, body={"code": "import sys; sys.stdout.buffer.write(b'\\xff\\xfe'); sys.stdout.flush()"})
    assert "stdout_b64" in binary, binary
    events = api.call("POST", base + "/cells", 200, body={"code": "print('a'); set_progress('STEP', '1/2') if 'set_progress' in dir() else None; 5"},
                      headers={"Accept": "application/x-ndjson"})
    assert events[0]["type"] == "started" and events[-1]["type"] == "result" and events[-1]["results"] is not None
    assert any(e["type"] == "stdout" for e in events)
    api.call("POST", base + "/interrupt", 200)
    api.call("POST", base + "/restart", 200)
    api.error("POST", base + "/cells", 400, "malformed_request", body={"code": "1", "code_b64": "MQ=="})
    api.error("POST", base + "/cells", 422, "invalid_argument", body={"code": "1", "timeout_s": 0})
    api.error("POST", base + "/cells", 413, "limit_exceeded", body={"code": "#" * (13 << 20)})


def test_commands_answer_a_document_or_a_stream(api: Api, sandbox_id: str) -> None:
    base = "/v1/sandboxes/%s" % sandbox_id
    done = api.call("POST", base + "/commands", 200, body={"command": "echo hi; echo err >&2; exit 3"})
    assert done["exit_code"] == 3 and done["reason"] == "exit" and done["stdout"] == "hi\n"
    missing = api.call("POST", base + "/commands", 200, body={"argv": ["no-such-program"]})
    assert missing["exit_code"] == 127 and missing["reason"] == "not_found"
    fed = api.call("POST", base + "/commands", 200, body={"argv": ["cat"], "stdin": "in", "env": {"X": "1"}, "cwd": "/tmp"})
    assert fed["stdout"] == "in"
    late = api.call("POST", base + "/commands", 200, body={"command": "sleep 5", "timeout_s": 0.3})
    assert late["status"] == "timeout" and late["reason"] == "deadline"
    events = api.call("POST", base + "/commands", 200, body={"command": "echo one; echo two >&2"},
                      headers={"Accept": "application/x-ndjson"})
    assert events[0]["type"] == "started" and events[-1]["type"] == "result" and events[-1]["exit_code"] == 0
    api.error("POST", base + "/commands", 400, "malformed_request", body={"command": "true", "argv": ["true"]})
    api.error("POST", "/v1/sandboxes/no-such-sandbox/commands", 404, "not_found", body={"command": "true"})


def test_files_of_the_volume_and_download_links(api: Api, sandbox_id: str) -> None:
    base = "/v1/sandboxes/%s" % sandbox_id
    up = api.call("PUT", base + "/files", 200, query={"path": "data/report.csv"}, data=b"a,b\n1,2\n")
    assert up["path"] == "/mnt/files/data/report.csv" and up["size"] == 8
    assert api.call("GET", base + "/files", 200, query={"path": "/mnt/files/data/report.csv"}) == b"a,b\n1,2\n"
    listing = api.call("GET", base + "/files:ls", 200, query={"path": "data"})
    assert [e["name"] for e in listing["entries"]] == ["report.csv"] and listing["next_cursor"] is None
    api.call("GET", base + "/files:ls", 200)
    link = api.call("POST", base + "/files:sign", 200, query={"path": "data/report.csv"}, body={"expires_in_s": 60})
    path, _, query = link["download_path"].partition("?")
    signed = dict(urllib.parse.parse_qsl(query))
    assert api.call("GET", path, 200, query=signed, token=False) == b"a,b\n1,2\n"
    api.error("GET", path, 403, "permission_denied", query=dict(signed, expires=str(int(signed["expires"]) + 1)), token=False)
    api.error("POST", base + "/files:sign", 422, "invalid_argument", query={"path": "data/report.csv"}, body={"expires_in_s": 0})
    api.error("GET", base + "/files", 400, "malformed_request")
    api.error("GET", base + "/files", 422, "invalid_argument", query={"path": "/etc/passwd"})
    api.error("GET", base + "/files", 404, "not_found", query={"path": "missing.txt"})
    api.error("PUT", base + "/files", 409, "already_exists", query={"path": "data"}, data=b"x")
    assert api.call("DELETE", base + "/files", 200, query={"path": "data", "recursive": "true"}) == {"removed": ["/mnt/files/data"]}


def test_fs_verbs_on_the_sandboxs_view(api: Api, sandbox_id: str) -> None:
    base = "/v1/sandboxes/%s" % sandbox_id
    written = api.call("PUT", base + "/fs", 200, query={"path": "src/app.py", "mode": "0600"}, data=b"print(1)\n")
    assert written == {"path": "/home/user/src/app.py", "size": 9}
    assert api.call("GET", base + "/fs", 200, query={"path": "/home/user/src/app.py"}) == b"print(1)\n"
    st = api.call("GET", base + "/fs:stat", 200, query={"path": "src/app.py"})
    assert st["type"] == "file" and st["mode"] == 0o600
    assert api.call("GET", base + "/fs:stat", 200, query={"path": "/usr"})["type"] == "dir"
    listing = api.call("GET", base + "/fs:ls", 200, query={"path": "src", "limit": 10})
    assert [e["name"] for e in listing["entries"]] == ["app.py"]
    assert api.call("POST", base + "/fs:mkdir", 201, query={"path": "a/b", "parents": "true"}) == {"path": "/home/user/a/b"}
    api.error("POST", base + "/fs:mkdir", 409, "already_exists", query={"path": "a/b"})
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        member = tarfile.TarInfo("notes/todo.md")
        member.size = 5
        tar.addfile(member, io.BytesIO(b"# do\n"))
    extracted = api.call("PUT", base + "/fs:extract", 200, query={"path": "unpacked"}, data=archive.getvalue())
    assert extracted["members"] >= 1 and extracted["path"] == "/home/user/unpacked"
    assert api.call("DELETE", base + "/fs", 200, query={"path": "a", "recursive": "true"}) == {"removed": ["/home/user/a"]}
    api.error("GET", base + "/fs:stat", 404, "not_found", query={"path": "a"})
    api.error("GET", base + "/fs:ls", 400, "malformed_request")
    api.error("GET", base + "/fs", 422, "invalid_argument", query={"path": "../etc/passwd"})
    api.error("PUT", base + "/fs", 403, "permission_denied", query={"path": "/usr/bin/evil"}, data=b"x")
    api.error("PUT", base + "/fs:extract", 422, "invalid_argument", query={"path": "x", "format": "rar"}, data=b"x")


def test_terminal_sessions(api: Api, sandbox_id: str) -> None:
    base = "/v1/sandboxes/%s/pty" % sandbox_id
    started = api.call("POST", base, 201, body={"command": "cat", "cols": 100, "rows": 30})
    n = started["session_id"]
    echoed = api.call("POST", "%s/%d/input" % (base, n), 200, body={"chars": "hello\n", "yield_ms": 300})
    assert "hello" in echoed.get("output", "") and echoed["exit_code"] is None
    api.call("GET", "%s/%d/output" % (base, n), 200, query={"yield_ms": 50})
    assert api.call("POST", "%s/%d/resize" % (base, n), 200, body={"cols": 90, "rows": 20}) == {"resized": True}
    assert api.call("DELETE", "%s/%d" % (base, n), 200) == {"killed": [n]}
    api.call("DELETE", base, 200)
    api.error("GET", "%s/x/output" % base, 404, "not_found")
    api.error("GET", "%s/%d/output" % (base, n), 400, "malformed_request", query={"yield_ms": "soon"})
    api.error("POST", base, 400, "malformed_request", body={})


def test_snapshots(api: Api, sandbox_id: str) -> None:
    made = api.call("POST", "/v1/snapshots", 201, body={"sandbox": sandbox_id, "name": "contract-snap"})
    try:
        assert made["sandbox"] == sandbox_id and made["name"] == "contract-snap"
        assert made["id"] in [s["id"] for s in api.call("GET", "/v1/snapshots", 200)["snapshots"]]
        assert api.call("GET", "/v1/snapshots/contract-snap", 200)["id"] == made["id"]
        api.error("POST", "/v1/snapshots", 400, "malformed_request", body={"name": "no sandbox"})
        api.error("POST", "/v1/snapshots", 404, "not_found", body={"sandbox": "no-such-sandbox"})
        assert api.call("DELETE", "/v1/snapshots/" + made["id"], 200) == {"removed": [made["id"]]}
    finally:
        api.send("DELETE", "/v1/snapshots/" + made["id"])
    api.error("GET", "/v1/snapshots/" + made["id"], 404, "not_found")


def test_sessions_and_their_sandboxes_routes(api: Api) -> None:
    session = api.call("POST", "/v1/sessions", 201, body={"user_id": "u-contract", "sandbox": {"sandbox_size": "standard"}})
    sid = session["session_id"]
    try:
        assert session["sandbox_id"] is None
        assert sid in [s["session_id"] for s in api.call("GET", "/v1/sessions", 200)["sessions"]]
        # A path that is no route is answered before the session's sandbox is made.
        for method, path in (("POST", "/v1/sessions/" + sid), ("GET", "/v1/sessions/%s/nothing" % sid)):
            CONTRACT.check_error(api.send(method, path), "NotFoundError")
        assert api.call("GET", "/v1/sessions/" + sid, 200)["sandbox_id"] is None
        ran = api.call("POST", "/v1/sessions/%s/commands" % sid, 200, body={"command": "echo from-session"})
        assert ran["stdout"] == "from-session\n"
        api.call("PUT", "/v1/sessions/%s/files" % sid, 200, query={"path": "s.txt"}, data=b"s")
        api.call("GET", "/v1/sessions/%s/fs:stat" % sid, 200, query={"path": "/mnt/files/s.txt"})
        sandbox = api.call("GET", "/v1/sessions/%s/sandbox" % sid, 200)
        patched = api.call("PATCH", "/v1/sessions/" + sid, 200, body={"sandbox": {"sandbox_size": "medium"}})
        assert patched["sandbox_id"] == sandbox["id"] and patched["sandbox"]["sandbox_size"] == "medium"
        assert api.call("DELETE", "/v1/sessions/" + sid, 200) == {"removed": [sid]}
    finally:
        api.send("DELETE", "/v1/sessions/" + sid)
    api.error("GET", "/v1/sessions/" + sid, 404, "not_found")
    disabled = api.call("POST", "/v1/sessions", 201, body={"sandbox": {"enable": False}})
    try:
        api.error("POST", "/v1/sessions/%s/cells" % disabled["session_id"], 400, "sandbox_disabled", body={"code": "1"})
    finally:
        api.call("DELETE", "/v1/sessions/" + disabled["session_id"], 200)
    api.error("POST", "/v1/sessions", 400, "malformed_request", body={"sandbox": {}, "workbench": {}})
    api.error("POST", "/v1/sessions", 422, "invalid_argument", body={"sandbox": {"sandbox_size": "huge"}})


def test_tools_the_workbench_and_the_tool_bridges_callbacks(api: Api) -> None:
    made = api.call("POST", "/v1/sandboxes", 201, body={"tools": {"backend": "callback", "call_timeout_s": 30}})
    base = "/v1/sandboxes/%s" % made["id"]
    try:
        bash = api.call("POST", base + "/tools/COMPOSIO_REMOTE_BASH_TOOL", 200, body={"command": "echo tool"})
        assert bash["successful"] is True and bash["data"]["stdout"] == "tool\n"
        cell = api.call("POST", base + "/tools/COMPOSIO_REMOTE_WORKBENCH", 200, body={"code_to_execute": "1 + 1"})
        assert cell["successful"] is True
        api.error("POST", base + "/tools/NO_SUCH_TOOL", 404, "not_found", body={})
        api.error("POST", base + "/tool_calls/c-999999", 404, "not_found", body={"result": 1})

        # The callback backend: the events stream, a call on it, its answer.
        conn = http.client.HTTPConnection(api.host, api.port, timeout=60)  # type: ignore[arg-type]
        conn.request("GET", base + "/events", headers={"Authorization": "Bearer %s" % api.token, "Accept": "application/x-ndjson"})
        stream = conn.getresponse()
        lines: List[bytes] = []
        result: Dict[str, Any] = {}
        runner = threading.Thread(target=lambda: result.update(api.call(
            "POST", base + "/cells", 200, body={"code": "run_composio_tool('ECHO', {'x': 1})"})))
        try:
            assert stream.status == 200
            lines.append(stream.readline())  # subscribed
            runner.start()
            while True:
                line = stream.readline()
                assert line, "the events stream ended"
                lines.append(line)
                if json.loads(line)["type"] == "tool_call":
                    break
            call = json.loads(lines[-1])
            assert api.call("POST", base + "/tool_calls/" + call["call_id"], 200, body={"result": {"echo": 1}, "error": None}) == {"accepted": True}
            runner.join(60)
        finally:
            conn.close()
        events = CONTRACT.check("GET", base + "/events", Answer(200, {"content-type": stream.getheader("content-type", "")}, b"".join(lines)))
        assert events[0] == {"type": "subscribed"} and events[-1]["helper"] == "run_tool"
        assert result.get("status") == "ok", result
    finally:
        api.call("DELETE", base, 200)
