#!/usr/bin/python3.11
"""Builds a tiny pure-Python wheel for the package tests and bench/network, and a PEP 503
simple index beside it: nothing is downloaded.

Usage: tiny_wheel.py DIR [--name tinypkg] [--module tinypkg] [--version 1.0]
Writes DIR/NAME-VERSION-py3-none-any.whl (importing MODULE gives MODULE.VALUE == 42 and
MODULE.NAME) and DIR/simple/NAME/index.html, and prints the wheel's path.
"""
import argparse
import base64
import hashlib
import os
import zipfile


def record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--name", default="tinypkg")
    parser.add_argument("--module", default=None)
    parser.add_argument("--version", default="1.0")
    args = parser.parse_args()
    module = args.module or args.name.replace("-", "_")
    dist = args.name.replace("-", "_")
    info = f"{dist}-{args.version}.dist-info"
    files = {
        f"{module}/__init__.py": f"VALUE = 42\nNAME = {args.name!r}\n".encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {args.name}\nVersion: {args.version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: nsbox-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/top_level.txt": f"{module}\n".encode(),
    }
    record = [record_line(p, d) for p, d in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    os.makedirs(args.dir, exist_ok=True)
    wheel = os.path.join(args.dir, f"{dist}-{args.version}-py3-none-any.whl")
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            z.writestr(path, data)
    index = os.path.join(args.dir, "simple", args.name.lower())
    os.makedirs(index, exist_ok=True)
    with open(os.path.join(index, "index.html"), "w") as f:
        name = os.path.basename(wheel)
        f.write(f'<!DOCTYPE html><html><body><a href="../../{name}">{name}</a></body></html>\n')
    print(wheel)


if __name__ == "__main__":
    main()
