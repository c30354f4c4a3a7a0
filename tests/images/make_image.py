#!/usr/bin/python3.11
"""Makes small OCI images offline, for the image tests: an OCI layout directory, an
oci-archive or a docker-archive (what `docker save` writes), from a built-in two-layer
tree that exercises what a layer may hold.

  make_image.py FORMAT OUT [--name NAME:TAG] [--tamper layer|config|manifest] [--marker TEXT] [--busybox PATH]

FORMAT: oci (a layout directory), oci-archive, docker-archive. The first layer holds
/etc/os-release, /bin/hello, a setuid file, an absolute and a relative symlink, a hard
link, a device node and directories the second layer whites out (a file, and an opaque
directory). --tamper: the named part's bytes no longer match the digest that names them.
--busybox: a static busybox as /bin/busybox with the applets the tests use linked to it
(a shell and a few tools: an image that runs commands, with no Python). --hostile-links:
the directories nsbox mounts on (/opt, /run, /home, /tmp, /mnt) are absolute links to
places on the host (HOSTILE_PREFIX-NAME), as an image could make them.
"""
import argparse
import gzip
import hashlib
import io
import json
import os
import tarfile


def member(tar, name, data=b"", mode=0o644, kind=tarfile.REGTYPE, link=""):
    info = tarfile.TarInfo(name)
    info.mode, info.type, info.linkname, info.mtime = mode, kind, link, 1700000000
    info.uid = info.gid = 0
    if kind == tarfile.REGTYPE:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    else:
        tar.addfile(info)


APPLETS = ["sh", "cat", "ls", "id", "echo", "env", "pwd", "touch", "rm", "mkdir", "stat", "sleep", "head", "wc", "dd", "grep"]


HOSTILE_PREFIX = "/tmp/nsbox-hostile-image"


def layer_one(marker, busybox=None, hostile=False):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        member(t, "etc/", kind=tarfile.DIRTYPE, mode=0o755)
        member(t, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nimageuser:x:1000:1000::/home/imageuser:/bin/sh\n")
        member(t, "etc/group", b"root:x:0:\nimagegroup:x:1000:\n")
        member(t, "etc/os-release", b'PRETTY_NAME="nsbox test image"\nMARKER=%s\n' % marker.encode())
        member(t, "bin/", kind=tarfile.DIRTYPE, mode=0o755)
        member(t, "bin/hello", b"#!/bin/sh\necho hello from the image\n", mode=0o755)
        member(t, "bin/su-ish", b"x", mode=0o4755)
        member(t, "bin/hello-link", kind=tarfile.LNKTYPE, link="bin/hello")
        member(t, "etc/abs-link", kind=tarfile.SYMTYPE, link="/etc/os-release")
        member(t, "etc/rel-link", kind=tarfile.SYMTYPE, link="os-release")
        member(t, "dev/", kind=tarfile.DIRTYPE, mode=0o755)
        member(t, "dev/null", kind=tarfile.CHRTYPE, mode=0o666)
        member(t, "gone.txt", b"removed by the next layer\n")
        member(t, "opaque/", kind=tarfile.DIRTYPE, mode=0o755)
        member(t, "opaque/old.txt", b"hidden by the opaque marker\n")
        member(t, "kept/", kind=tarfile.DIRTYPE, mode=0o755)
        member(t, "kept/a.txt", b"a\n")
        member(t, "ro/", kind=tarfile.DIRTYPE, mode=0o555)
        member(t, "ro/old.txt", b"old\n")
        if busybox:
            with open(busybox, "rb") as f:
                member(t, "bin/busybox", f.read(), mode=0o755)
            for applet in APPLETS:
                member(t, "bin/" + applet, kind=tarfile.SYMTYPE, link="busybox")
        if hostile:
            for name in ("opt", "run", "home", "tmp", "mnt"):
                member(t, name, kind=tarfile.SYMTYPE, link=HOSTILE_PREFIX + "-" + name)
    return buf.getvalue()


def layer_two():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        member(t, ".wh.gone.txt")
        member(t, "opaque/", kind=tarfile.DIRTYPE, mode=0o755)
        member(t, "opaque/.wh..wh..opq")
        member(t, "opaque/new.txt", b"after the opaque marker\n")
        member(t, "kept/b.txt", b"b\n")
        member(t, "ro/new.txt", b"new\n")
    return buf.getvalue()


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def build(marker, tamper, busybox=None, hostile=False):
    tars = [layer_one(marker, busybox, hostile), layer_two()]
    diff_ids = [digest(t) for t in tars]
    blobs = [gzip.compress(t, mtime=0) for t in tars]
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/bin:/usr/bin", "IMAGE_MARKER=" + marker], "WorkingDir": "/kept", "User": "1000"},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }, sort_keys=True).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": digest(b), "size": len(b)} for b in blobs],
    }, sort_keys=True).encode()
    if tamper == "config":  # the config no longer names the layers' real ids
        doc = json.loads(config)
        doc["rootfs"]["diff_ids"][1] = "sha256:" + "0" * 64
        config = json.dumps(doc, sort_keys=True).encode()
        manifest = json.loads(manifest)
        manifest["config"].update(digest=digest(config), size=len(config))
        manifest = json.dumps(manifest, sort_keys=True).encode()
    return tars, blobs, config, manifest, diff_ids


def write_oci(out, name, tars, blobs, config, manifest, tamper):
    os.makedirs(os.path.join(out, "blobs", "sha256"), exist_ok=True)
    stored = {digest(b): b for b in blobs + [config, manifest]}
    for d, data in stored.items():
        if tamper == "layer" and data is blobs[1]:
            data = data[:-8] + bytes(8)
        if tamper == "manifest" and data is manifest:
            data = data.replace(b'"schemaVersion": 2', b'"schemaVersion":  2')
        with open(os.path.join(out, "blobs", "sha256", d.split(":")[1]), "wb") as f:
            f.write(data)
    with open(os.path.join(out, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    index = {"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest(manifest), "size": len(manifest),
        "annotations": {"org.opencontainers.image.ref.name": name.split(":")[-1] if name else "latest"}}]}
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(index, f)


def tar_dir(src, out):
    with tarfile.open(out, "w") as t:
        for name in sorted(os.listdir(src)):
            t.add(os.path.join(src, name), arcname=name)


def write_docker(out, name, tars, config, tamper):
    with tarfile.open(out, "w") as t:
        def add(n, data):
            info = tarfile.TarInfo(n)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        layer_names = []
        for i, data in enumerate(tars):
            hexd = hashlib.sha256(data).hexdigest()
            if tamper == "layer" and i == 1:
                data = data[:-1024] + b"x" * 1024
            add(hexd + "/layer.tar", data)
            layer_names.append(hexd + "/layer.tar")
        config_name = hashlib.sha256(config).hexdigest() + ".json"
        add(config_name, config)
        add("manifest.json", json.dumps([{"Config": config_name, "RepoTags": [name] if name else [], "Layers": layer_names}]).encode())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("format", choices=["oci", "oci-archive", "docker-archive"])
    p.add_argument("out")
    p.add_argument("--name", default="nsbox-test:latest")
    p.add_argument("--tamper", choices=["layer", "config", "manifest"])
    p.add_argument("--marker", default="one")
    p.add_argument("--busybox")
    p.add_argument("--hostile-links", action="store_true")
    a = p.parse_args()
    tars, blobs, config, manifest, _ = build(a.marker, a.tamper, a.busybox, a.hostile_links)
    if a.format == "docker-archive":
        write_docker(a.out, a.name, tars, config, a.tamper)
    elif a.format == "oci":
        write_oci(a.out, a.name, tars, blobs, config, manifest, a.tamper)
    else:
        staging = a.out + ".layout"
        write_oci(staging, a.name, tars, blobs, config, manifest, a.tamper)
        tar_dir(staging, a.out)
        import shutil
        shutil.rmtree(staging)


if __name__ == "__main__":
    main()
