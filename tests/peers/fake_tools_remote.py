"""Fake remote tool service for nsbox tests (Python 3.11 standard library only).

One loopback HTTP server that stands in for two remote services:

* a Composio-compatible tool service (v3 API):
    POST /api/v3/tools/execute/{slug}   header x-api-key: KEY
    GET  /api/v3/tools?toolkit_slug=&search=   header x-api-key: KEY
  Slugs: ECHO, FAIL, RATE_LIMITED_ONCE, ALWAYS_429, SERVER_ERROR,
  INPUT_REQUIRED, SLOW, GET_CONFIG, COMPOSIO_SEARCH_WEB (what web_search runs: an
  echo) and `proxy` (POST /api/v3/tools/execute/proxy: echoes the request's body as
  its arguments); anything else is 404.
* an OpenAI-compatible chat endpoint:
    POST /v1/chat/completions   header Authorization: Bearer LLM_KEY
  Replies "echo: <last message content>"; a last message of "fail" gets 500.

Test helpers (no auth): GET /_stats returns the recorded requests (never the
key values, only whether they matched), per slug/path counts and when each SLOW
request was served (its [start, end] in seconds on a monotonic clock, by the
order they ended); POST /_reset clears all of that state.

Usage: fake_tools_remote.py --key KEY [--llm-key KEY2]   (KEY2 defaults to KEY)
Binds 127.0.0.1 on a free port, prints one line {"port": N} to stdout, then
serves until stdin reaches EOF or SIGTERM arrives, and exits 0. Every socket
has a 30 s timeout; request bodies over 10 MiB get 413 without being read.
"""

import argparse
import base64
import collections
import hmac
import http.server
import json
import os
import signal
import socketserver
import sys
import threading
import time
import urllib.parse

SOCKET_TIMEOUT_S = 30
MAX_BODY_BYTES = 10 * 1024 * 1024
MAX_RECORDS = 10_000
MAX_SLOW_MS = 30_000
EXECUTE_PREFIX = "/api/v3/tools/execute/"

TOOL_PROPERTIES = {
    "ECHO": {"message": {"type": "string"}, "repoName": {"type": "string"}},
    "FAIL": {}, "RATE_LIMITED_ONCE": {}, "ALWAYS_429": {}, "SERVER_ERROR": {},
    "INPUT_REQUIRED": {}, "SLOW": {"ms": {"type": "integer"}}, "GET_CONFIG": {},
    "EXTRACT_TEXT": {"name": {"type": "string"}, "mime_type": {"type": "string"},
                     "content_base64": {"type": "string"}},
}
CONFIG_DATA = {"api_key": "k-123", "user_name": "ada",
               "nested": {"created_at": 1, "items": [{"display_name": "x"}]}}
RATE_LIMITED = (429, {"error": {"message": "rate limited"}}, {"Retry-After": "0"})
# Slugs whose answer never depends on the request: (status, body, extra headers).
FIXED_ANSWERS = {
    "FAIL": (200, {"data": {}, "error": "the tool failed: bad input", "successful": False}, None),
    "ALWAYS_429": RATE_LIMITED,
    "SERVER_ERROR": (500, {"error": {"message": "internal error"}}, None),
    "INPUT_REQUIRED": (200, {"data": {}, "error": None, "successful": True,
                             "result_type": "input_required",
                             "message": "approve the connection in the dashboard"}, None),
    "GET_CONFIG": (200, {"data": CONFIG_DATA, "error": None, "successful": True}, None),
}


class State:
    """Everything the server remembers between requests; guarded by one lock."""

    def __init__(self, key, llm_key):
        self.key, self.llm_key = key, llm_key
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        with self.lock:
            self.records = collections.deque(maxlen=MAX_RECORDS)
            self.counts = collections.Counter()
            self.rate_limited_tokens = set()
            self.slow_calls = []

    def record(self, entry, count_key):
        with self.lock:
            self.records.append(entry)
            self.counts[count_key] += 1

    def first_use_of_token(self, token):
        marker = json.dumps(token, sort_keys=True)
        with self.lock:
            fresh = marker not in self.rate_limited_tokens
            self.rate_limited_tokens.add(marker)
            return fresh

    def served_slow(self, start, end):
        with self.lock:
            self.slow_calls.append([start, end])

    def stats(self):
        with self.lock:
            return {"requests": list(self.records),
                    "slow_calls": list(self.slow_calls),
                    "counts": dict(self.counts)}


def tool_description(slug):
    return {"slug": slug, "name": slug.replace("_", " ").title(),
            "description": f"Fake tool {slug} for nsbox tests.",
            "toolkit": {"slug": "fake", "name": "Fake"},
            "input_parameters": {"type": "object",
                                 "properties": TOOL_PROPERTIES[slug]}}


def matches(tool, toolkit, search):
    if toolkit and tool["toolkit"]["slug"].lower() != toolkit.lower():
        return False
    text = " ".join((tool["slug"], tool["name"], tool["description"])).lower()
    return not search or search.lower() in text


def extract_answer(arguments):
    """A stand-in text extractor: says what it was given (name, type, decoded size)."""
    try:
        content = base64.b64decode(arguments.get("content_base64", ""), validate=True)
    except (ValueError, TypeError):
        return 200, {"data": {}, "error": "content_base64 is not base64", "successful": False}
    text = f"{arguments.get('name')} ({arguments.get('mime_type')}, {len(content)} bytes)"
    return 200, {"data": {"text": text}, "error": None, "successful": True}


def echo_answer(slug, arguments, user_id):
    return 200, {"data": {"slug": slug, "arguments": arguments, "user_id": user_id},
                 "error": None, "successful": True}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT_S
    # Headers and body go out in two writes: with Nagle on, a kept-alive client waits for
    # the delayed ACK (40 ms a call) before the body comes.
    disable_nagle_algorithm = True
    state: State  # set on the class by main()

    def log_message(self, format, *args):  # noqa: A002 - silence stderr logging
        pass

    # ---- plumbing -------------------------------------------------------
    def send_json(self, status, body, headers=None):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def reject_and_close(self, status, message):
        self.close_connection = True
        self.send_json(status, {"error": {"message": message}})

    def body_length(self):
        """Declared body size, or None after answering an unusable request."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self.reject_and_close(411, "chunked bodies are not supported")
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if length < 0:
            return self.reject_and_close(400, "bad Content-Length")
        if length > MAX_BODY_BYTES:
            return self.reject_and_close(413, "request body too large")
        return length

    def handle_expect_100(self):
        return self.body_length() is not None and super().handle_expect_100()

    def key_ok(self):
        return hmac.compare_digest(self.headers.get("x-api-key", "").encode(),
                                   self.state.key.encode())

    def bearer_ok(self):
        expected = ("Bearer " + self.state.llm_key).encode()
        return hmac.compare_digest(self.headers.get("Authorization", "").encode(),
                                   expected)

    def record(self, path, slug=None, arguments=None, user_id=None):
        entry = {"method": self.command, "path": path, "slug": slug,
                 "arguments": arguments, "user_id": user_id,
                 "api_key_ok": self.key_ok(), "authorization_ok": self.bearer_ok()}
        self.state.record(entry, slug or path)

    # ---- dispatch -------------------------------------------------------
    def do_GET(self):
        self.dispatch()

    do_POST = do_GET

    def dispatch(self):
        length = self.body_length()
        if length is None:
            return
        raw = self.rfile.read(length) if length else b""
        url = urllib.parse.urlsplit(self.path)
        route = (self.command, url.path)
        if route == ("GET", "/_stats"):
            return self.send_json(200, self.state.stats())
        if route == ("POST", "/_reset"):
            self.state.reset()
            return self.send_json(200, {"ok": True})
        if route == ("GET", "/api/v3/tools"):
            return self.list_tools(url)
        if route == ("POST", "/v1/chat/completions"):
            return self.chat(url.path, raw)
        if self.command == "POST" and url.path.startswith(EXECUTE_PREFIX):
            return self.execute(url.path, raw)
        self.record(url.path)
        self.send_json(404, {"error": {"message": f"no route: {self.command} {url.path}"}})

    # ---- endpoints ------------------------------------------------------
    def list_tools(self, url):
        self.record(url.path)
        if not self.key_ok():
            return self.send_json(401, {"error": {"message": "invalid api key", "status": 401}})
        query = urllib.parse.parse_qs(url.query)
        toolkit = query.get("toolkit_slug", [""])[0]
        search = query.get("search", [""])[0]
        tools = [tool_description(slug) for slug in TOOL_PROPERTIES]
        items = [t for t in tools if matches(t, toolkit, search)]
        self.send_json(200, {"items": items, "next_cursor": None, "total_pages": 1})

    def execute(self, path, raw):
        slug = urllib.parse.unquote(path[len(EXECUTE_PREFIX):])
        try:
            body = json.loads(raw or b"{}")
            arguments = body.get("arguments") or {}
            user_id = body.get("user_id")
            if slug == "proxy":
                arguments = {k: v for k, v in body.items() if k != "user_id"}
            if not isinstance(arguments, dict):
                raise ValueError("arguments must be an object")
        except (ValueError, AttributeError):
            body = None
            arguments = user_id = None
        self.record(path, slug, arguments, user_id)
        if not self.key_ok():
            return self.send_json(401, {"error": {"message": "invalid api key", "status": 401}})
        if body is None:
            return self.send_json(400, {"error": {"message": "invalid JSON body"}})
        status, answer, headers = self.run_tool(slug, arguments, user_id)
        self.send_json(status, answer, headers)

    def run_tool(self, slug, arguments, user_id):
        """Returns (status, body, extra headers) for one tool call."""
        if slug in FIXED_ANSWERS:
            return FIXED_ANSWERS[slug]
        if slug == "RATE_LIMITED_ONCE" and self.state.first_use_of_token(arguments.get("token")):
            return RATE_LIMITED
        if slug in ("ECHO", "RATE_LIMITED_ONCE", "COMPOSIO_SEARCH_WEB", "proxy"):
            return (*echo_answer(slug, arguments, user_id), None)
        if slug == "SLOW":
            return (*self.slow(arguments, user_id), None)
        if slug == "EXTRACT_TEXT":
            return (*extract_answer(arguments), None)
        return 404, {"error": {"message": f"tool not found: {slug}"}}, None

    def slow(self, arguments, user_id):
        ms = arguments.get("ms", 50)
        if isinstance(ms, bool) or not isinstance(ms, (int, float)):
            return 400, {"error": {"message": "ms must be a number"}}
        start = time.monotonic()
        try:
            time.sleep(min(max(ms, 0), MAX_SLOW_MS) / 1000)
        finally:
            self.state.served_slow(start, time.monotonic())
        return echo_answer("SLOW", arguments, user_id)

    def chat(self, path, raw):
        self.record(path)
        if not self.bearer_ok():
            return self.send_json(401, {"error": {"message": "Incorrect API key provided",
                                                  "type": "invalid_request_error"}})
        try:
            body = json.loads(raw)
            model, content = body.get("model"), body["messages"][-1]["content"]
        except (ValueError, AttributeError, KeyError, IndexError, TypeError):
            return self.send_json(400, {"error": {"message": "invalid request body",
                                                  "type": "invalid_request_error"}})
        if not isinstance(content, str):
            content = json.dumps(content)
        if content == "fail":
            return self.send_json(500, {"error": {"message": "model overloaded"}})
        self.send_json(200, {
            "id": "chatcmpl-1", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "echo: " + content}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def server_bind(self):
        # Skip HTTPServer's getfqdn() lookup: no name resolution, no delay.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


def stop_on_stdin_eof(server):
    # Raw fd reads: a daemon thread blocked here holds no interpreter-level lock.
    while os.read(sys.stdin.fileno(), 65536):
        pass
    server.shutdown()


def main():
    parser = argparse.ArgumentParser(description="Fake Composio/OpenAI peer for tests.")
    parser.add_argument("--key", required=True)
    parser.add_argument("--llm-key")
    args = parser.parse_args()
    Handler.state = State(args.key, args.llm_key if args.llm_key is not None else args.key)
    server = Server(("127.0.0.1", 0), Handler)
    stop = lambda *_: threading.Thread(target=server.shutdown, daemon=True).start()  # noqa: E731
    signal.signal(signal.SIGTERM, stop)
    threading.Thread(target=stop_on_stdin_eof, args=(server,), daemon=True).start()
    print(json.dumps({"port": server.server_address[1]}), flush=True)
    server.serve_forever()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
