"""Helpers for code running in an nsbox sandbox (docs/tools.md). Preloaded in every cell,
and importable from any Python process in the sandbox:

    from nsbox_helpers import run_composio_tool, invoke_llm, upload_local_file

    repos, error = run_composio_tool("GITHUB_LIST_REPOS", {"owner": "octocat"})

Each returns a (result, error) pair and never raises for a remote failure: error is None
on success, else a one-line message. Calls from many threads run at once (the bridge
runs 16 by default and queues more). Keys never enter the sandbox: the tool bridge, on the
host side, adds them.

Results forgive field-name slips in case style: result["apiKey"] finds "api_key" (and the
reverse), with a one-line warning on stderr naming the real key; a result is still the
plain JSON it is (a dict subclass)."""
import os
import sys

from . import transport
from .forgiving import correct_arguments, forgive

__all__ = ["run_composio_tool", "run_tool", "invoke_llm", "upload_local_file", "proxy_execute", "web_search",
           "smart_file_extract"]

_schemas = {}  # tool slug -> its input schema (None: unknown), per process


def _call(helper, args):
    reply = transport.call(helper, args)
    if not isinstance(reply, dict):
        return None, f"{helper}: malformed answer from the tool bridge"
    error = reply.get("error")
    if error is not None:
        return None, str(error)
    return forgive(reply.get("result")), None


def _schema(slug):
    if slug not in _schemas and len(_schemas) < 4096:
        schema, _ = _call("tool_schema", {"tool": slug})
        _schemas[slug] = schema if isinstance(schema, dict) else None
    return _schemas.get(slug)


def run_composio_tool(tool_slug, arguments=None):
    """Runs a tool: run_composio_tool("GITHUB_LIST_REPOS", {"owner": "x"}) -> (data, error).
    Argument names that differ from the tool's schema only in case style are corrected
    (and said on stderr) when the schema is known."""
    if not isinstance(tool_slug, str) or not tool_slug:
        return None, "run_composio_tool: the tool slug must be a non-empty string"
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return None, f"{tool_slug}: the arguments must be a dict, not {type(arguments).__name__}"
    schema = _schema(tool_slug)
    if schema:
        arguments, fixes = correct_arguments(arguments, schema)
        for given, real in fixes:
            print(f"nsbox: {tool_slug} has no argument '{given}'; sent it as '{real}'", file=sys.stderr)
    return _call("run_tool", {"tool": tool_slug, "arguments": arguments})


run_tool = run_composio_tool


def invoke_llm(query=None, messages=None, model=None, max_tokens=None):
    """Asks a language model: invoke_llm("Summarise: ...") -> (text, error); or with
    messages=[{"role": "user", "content": "..."}], model=, max_tokens=."""
    options = {k: v for k, v in (("messages", messages), ("model", model), ("max_tokens", max_tokens)) if v is not None}
    return _call("invoke_llm", {"query": query, "options": options})


def proxy_execute(endpoint, method, body=None, connected_account_id=None, parameters=None):
    """An authenticated call to a connected account's API, the key added outside:
    proxy_execute("/user/repos", "GET", connected_account_id="ca_...") -> (data, error)."""
    return _call("proxy_execute", {"endpoint": endpoint, "method": method, "body": body,
                                   "connected_account_id": connected_account_id, "parameters": parameters})


def web_search(query):
    """Searches the web through the tool service: web_search("nsbox sandbox") -> (results, error)."""
    return _call("web_search", {"query": query})


def upload_local_file(*paths):
    """Hands files to the user: each is copied into /mnt/files/.nsbox/shared/ unless it is
    in /mnt/files already, and answered with {"url", "expires_at", "mount_relative_path",
    "size"} (a list of those for several paths)."""
    if not paths:
        return None, "upload_local_file: give at least one path"
    try:
        absolute = [os.path.abspath(os.fspath(p)) for p in paths]
    except TypeError as e:
        return None, f"upload_local_file: {e}"
    return _call("upload_local_file", {"paths": absolute})


def smart_file_extract(path):
    """The text of a file: PDF (pdftotext, run here in the sandbox), plain text, CSV, JSON
    -> (text, error); other kinds through the tool bridge's extractor when one is set."""
    from .extract import extract_text  # only when used: it imports subprocess
    return extract_text(path, _call)
