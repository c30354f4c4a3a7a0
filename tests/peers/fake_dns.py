#!/usr/bin/python3.11
"""A DNS responder for the network tests (`--net internet`'s forwarder, the egress proxy's
lookups): answers an A query with the address given for its name (--name NAME=ADDRESS),
or else the default one (--answer), and everything else with an empty answer, over UDP
on the address and port it is given, inside the test's own network namespace. Nothing
here leaves the machine.

Usage: fake_dns.py --listen ADDRESS --answer ADDRESS [--name NAME=ADDRESS]... [--port 53]
Prints one line {"ready": true} once bound, then serves until stdin reaches EOF.
"""
import argparse
import json
import socket
import struct
import sys
import threading

MAX_QUERY = 512


def question_name(query, end):
    """The queried name, lower-case, from the labels of the question (12 to `end`)."""
    labels, at = [], 12
    while at < end:
        length = query[at]
        labels.append(query[at + 1:at + 1 + length].decode("ascii", "replace"))
        at += length + 1
    return ".".join(labels).lower()


def answer(query, default, names):
    """The response to one query: the question echoed, and one A record when asked for A."""
    if len(query) < 12:
        return None
    ident, _flags, qdcount = struct.unpack("!HHH", query[:6])
    if qdcount != 1:
        return None
    end = 12
    while end < len(query) and query[end] != 0:
        end += query[end] + 1
    if end + 5 > len(query):
        return None
    question = query[12:end + 5]
    qtype = struct.unpack("!H", query[end + 1:end + 3])[0]
    records = b""
    count = 0
    if qtype == 1:  # A
        address = names.get(question_name(query, end), default)
        records = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + socket.inet_aton(address)
        count = 1
    header = struct.pack("!HHHHHH", ident, 0x8180, 1, count, 0, 0)
    return header + question + records


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", required=True)
    parser.add_argument("--answer", required=True)
    parser.add_argument("--name", action="append", default=[])
    parser.add_argument("--port", type=int, default=53)
    args = parser.parse_args()
    names = dict(item.lower().split("=", 1) for item in args.name)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((args.listen, args.port))

    def serve():
        while True:
            query, peer = sock.recvfrom(MAX_QUERY)
            reply = answer(query, args.answer, names)
            if reply:
                sock.sendto(reply, peer)

    threading.Thread(target=serve, daemon=True).start()
    print(json.dumps({"ready": True}), flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
