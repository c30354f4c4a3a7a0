"""Sandboxes are not the server's: they outlive a stopped server and are served again when
it comes back (on the same state root)."""
from __future__ import annotations

import os

import nsbox
from conftest import Server


def test_sandboxes_survive_a_server_restart(fresh_server: Server) -> None:
    c = fresh_server.client("tcp")
    sbx = nsbox.Sandbox.create(name="survivor", client=c)
    try:
        sbx.run_code("x = 41")
        sbx.files.upload(b"kept", "kept.txt")
        session = nsbox.Session.create(user_id="restart", client=c)
        session.run_code("s = 'session state'")
        c.close()

        assert fresh_server.stop() == 0  # SIGTERM: exits 0
        assert not os.path.exists(fresh_server.socket)  # the listener's socket is removed
        fresh_server.start()
        assert fresh_server.starts == 2

        for transport in ("socket", "tcp"):
            c2 = fresh_server.client(transport)
            try:
                again = nsbox.Sandbox.connect("survivor", client=c2)
                assert again.id == sbx.id and again.info().status == "running"
                assert again.run_code("x + 1").results == "42"
                assert again.files.download("kept.txt").buffer() == b"kept"
                s2 = nsbox.Session.connect(session.session_id, client=c2)
                assert s2.run_code("s").results == "'session state'"
            finally:
                c2.close()
    finally:
        c3 = fresh_server.client()
        try:
            for s in nsbox.Session.list(client=c3):
                c3.json("DELETE", "/v1/sessions/" + s.session_id)
            nsbox.Sandbox.connect(sbx.id, client=c3).remove()
        finally:
            c3.close()
    assert fresh_server.sandboxes() == []
