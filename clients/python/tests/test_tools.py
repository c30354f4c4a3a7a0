"""The tool bridge through the API: a sandbox created with ``tools`` answers its helpers
from a tools directory under the server's NSBOX_TOOLS_ROOT (and refuses one elsewhere),
and the hosted workbench tools answer in the hosted envelope."""
from __future__ import annotations

import os
import stat

import pytest

import nsbox
from conftest import Server


def _tools_dir(server: Server) -> str:
    path = os.path.join(server.tools_root, "api-tools")
    os.makedirs(path, exist_ok=True)
    tool = os.path.join(path, "GREET")
    with open(tool, "w") as f:
        f.write("#!/usr/bin/python3.11\nimport json, sys\nprint(json.dumps({'hello': json.load(sys.stdin)['name']}))\n")
    os.chmod(tool, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    return path


def test_a_sandbox_created_with_a_tools_directory_answers_its_helpers(sock_client: nsbox.Client, server: Server) -> None:
    with nsbox.Sandbox.create(tools={"tools_dir": _tools_dir(server)}, client=sock_client) as sbx:
        assert sbx.info().raw["tools"]["backend"] == "dir"
        got = sbx.run_code("run_composio_tool('GREET', {'name': 'ada'})")
        assert got.results == "({'hello': 'ada'}, None)", got.raw


def test_a_tools_directory_outside_the_servers_tools_root_is_refused(sock_client: nsbox.Client) -> None:
    with pytest.raises(nsbox.NsboxError) as refused:
        nsbox.Sandbox.create(tools={"tools_dir": "/usr/bin"}, client=sock_client)
    assert refused.value.code == "permission_denied"
    assert "tools root" in str(refused.value)


def test_the_workbench_tools_answer_in_the_hosted_envelope(sandbox: nsbox.Sandbox) -> None:
    cell = sandbox.workbench_tool("COMPOSIO_REMOTE_WORKBENCH", {"code_to_execute": "x = 20\nx * 2 + 2"})
    assert cell["successful"] is True and cell["error"] is None
    assert cell["data"]["results"] == "42"
    bash = sandbox.workbench_tool("COMPOSIO_REMOTE_BASH_TOOL", {"command": "echo hi; exit 4"})
    assert bash["successful"] is False
    assert bash["data"]["stdout"] == "hi\n" and bash["data"]["stdoutLines"] == 1 and bash["data"]["exit_code"] == 4
    with pytest.raises(nsbox.NsboxError) as bad:
        sandbox.workbench_tool("COMPOSIO_REMOTE_WORKBENCH", {"code": "1"})
    assert bad.value.code == "malformed_request"


def test_upload_local_file_under_the_server_answers_a_signed_link_that_opens_without_a_token(
        sandbox: nsbox.Sandbox, server: Server) -> None:
    import json
    import urllib.error
    import urllib.request
    got = sandbox.run_code("open('/tmp/report.txt', 'w').write('quarterly')\n"
                           "import json; print(json.dumps(upload_local_file('/tmp/report.txt')))")
    link, error = json.loads(got.stdout)
    assert error is None, got.raw
    assert link["mount_relative_path"].startswith(".nsbox/shared/") and link["size"] == 9
    assert link["expires_at"].endswith("Z")
    url = link["url"]
    assert url.startswith(server.url + "/v1/sandboxes/" + sandbox.id + "/files?path="), url
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=30) as answer:  # no token: the signature is the permission
        assert answer.read() == b"quarterly"
    with pytest.raises(urllib.error.HTTPError) as altered:
        opener.open(url.replace("report.txt", "other.txt"), timeout=30)
    assert altered.value.code == 403
    # No copy on the server's host: the link reads the volume.
    assert not os.path.exists(os.path.join(server.root, "data", "shared", sandbox.id))


def test_an_embedder_serves_the_sandboxs_tool_calls_from_its_own_process(sock_client: nsbox.Client) -> None:
    seen = []

    def handler(helper, args):
        seen.append((helper, args))
        if args.get("tool") == "BROKEN":
            raise RuntimeError("no such account")
        return {"helper": helper, "args": args}

    with nsbox.Sandbox.create(tools={"backend": "callback", "call_timeout_s": 30}, client=sock_client) as sbx:
        # Before anyone serves them, calls are refused at once with a clear error.
        early = sbx.run_code("run_composio_tool('X', {})")
        assert "no client serves this sandbox's tool calls" in early.results, early.raw
        server = sbx.on_tool_call(handler)
        try:
            got = sbx.run_code("import json\n"
                               "from concurrent.futures import ThreadPoolExecutor\n"
                               "with ThreadPoolExecutor(8) as pool:\n"
                               "    many = list(pool.map(lambda i: run_composio_tool('ECHO', {'i': i}), range(20)))\n"
                               "print(json.dumps([run_composio_tool('ECHO', {'x': 1}), invoke_llm('hi'),\n"
                               "                  run_composio_tool('BROKEN', {}), sum(1 for r, e in many if e is None)]))")
            assert got.status == "ok", got.raw
            echo, llm, broken, ok = __import__("json").loads(got.stdout)
            assert echo == [{"helper": "run_tool", "args": {"tool": "ECHO", "arguments": {"x": 1}}}, None]
            assert llm[0]["helper"] == "invoke_llm" and llm[0]["args"]["query"] == "hi"
            assert broken[0] is None and "RuntimeError: no such account" in broken[1]
            assert ok == 20
            # A script of the bash tool is served the same way, through the bridge socket.
            script = sbx.commands.run("python3 -c 'from nsbox_helpers import run_tool; print(run_tool(\"S\", {}))'")
            assert "'helper': 'run_tool'" in script.stdout.decode(), script.raw
            assert server.error is None
        finally:
            server.stop()
        # Unknown call ids are refused.
        with pytest.raises(nsbox.NotFound):
            sock_client.json("POST", "/v1/sandboxes/%s/tool_calls/c-999999" % sbx.id,
                             json_body={"result": 1, "error": None})
    assert len(seen) == 24
