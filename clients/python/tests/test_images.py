"""A sandbox made from an image through the API (docs/images.md): the create document's
``image`` names an image of the server's store (pulled with the CLI into the server's
state root, from an image tests/images/make_image.py makes offline), the sandbox's
record carries its id and Env (checked against api/openapi.yaml like every answer),
commands run in the image's tree, and a cell is refused as unsupported, saying why."""
from __future__ import annotations

import os
import subprocess
import tempfile
from typing import Iterator

import pytest

import nsbox
from conftest import NSBOX_BIN, Server, started_server

MAKE_IMAGE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests", "images", "make_image.py")


@pytest.fixture(scope="module")
def image_server() -> Iterator[Server]:
    if not os.path.exists("/bin/busybox"):
        pytest.skip("no static busybox here (Debian's busybox-static) to make an image with a shell [doctor: none]")
    with started_server() as s:
        with tempfile.TemporaryDirectory() as made:
            layout = os.path.join(made, "bb")
            subprocess.run(["/usr/bin/python3.11", MAKE_IMAGE, "oci", layout, "--busybox", "/bin/busybox", "--marker", "api"],
                           check=True, timeout=120)
            assert NSBOX_BIN is not None
            subprocess.run([NSBOX_BIN, "--root", s.root, "image", "pull", "oci:" + layout, "--name", "bb"], check=True,
                           timeout=300, capture_output=True)
        yield s


def test_a_sandbox_from_an_image_runs_commands_in_its_tree_and_refuses_cells(image_server: Server) -> None:
    c = image_server.client()
    try:
        with nsbox.Sandbox.create(image="bb", client=c) as sbx:
            assert len(sbx.last_info.raw["image"]) == 64
            assert sbx.last_info.raw["image_env"] == ["PATH=/bin:/usr/bin", "IMAGE_MARKER=api"]
            r = sbx.commands.run("grep MARKER /etc/os-release; echo $IMAGE_MARKER; ls /usr || echo no-usr")
            assert r.exit_code == 0, r.stderr
            assert r.stdout.decode() == "MARKER=api\napi\nno-usr\n"
            with pytest.raises(nsbox.Unsupported) as e:
                sbx.run_code("print(1)")
            assert "the image's own Python" in str(e.value)
        with pytest.raises(nsbox.NotFound):
            nsbox.Sandbox.create(image="no-such-image", client=c)
        assert image_server.sandboxes() == []
    finally:
        c.close()
