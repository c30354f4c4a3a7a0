#!/usr/bin/python3.11
"""An upstream for the network-policy tests and bench/network: an HTTP and an HTTPS
server on 127.0.0.1, each on a free port, for names that the tests map to loopback
(NSBOX_TEST_RESOLVE, read by the tests' nsbox-with-test-hooks). Nothing here leaves the machine.

Usage: net_upstream.py --name NAME   (the certificate's name; default good.test)
Prints one line {"http": PORT, "https": PORT} to stdout, then serves until stdin reaches
EOF or SIGTERM arrives. The certificate is self-signed, made at start with openssl into
a temporary directory that goes at exit.

    GET /          "hello from upstream, Host: <the Host header>"
    GET /bytes/N   N bytes (at most 1 GiB), for throughput
"""

import argparse
import http.server
import json
import os
import signal
import socketserver
import ssl
import subprocess
import sys
import tempfile
import threading

SOCKET_TIMEOUT_S = 30
MAX_BYTES = 1 << 30
CHUNK = bytes(1 << 20)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT_S

    def log_message(self, format, *args):  # noqa: A002 - keep stderr quiet
        pass

    def do_GET(self):
        if self.path.startswith("/bytes/"):
            try:
                n = min(int(self.path[len("/bytes/"):]), MAX_BYTES)
            except ValueError:
                n = 0
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            while n > 0:
                chunk = CHUNK[:min(n, len(CHUNK))]
                self.wfile.write(chunk)
                n -= len(chunk)
            return
        body = f"hello from upstream, Host: {self.headers.get('Host')}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def make_certificate(directory, name):
    key, cert = os.path.join(directory, "key.pem"), os.path.join(directory, "cert.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={name}",
                    "-addext", f"subjectAltName=DNS:{name}", "-keyout", key, "-out", cert],
                   check=True, capture_output=True, timeout=60)
    return key, cert


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", default="good.test")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nsbox-upstream-") as directory:
        key, cert = make_certificate(directory, args.name)
        plain = Server(("127.0.0.1", 0), Handler)
        tls = Server(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        tls.socket = context.wrap_socket(tls.socket, server_side=True)
        for server in (plain, tls):
            threading.Thread(target=server.serve_forever, daemon=True).start()
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        print(json.dumps({"http": plain.server_address[1], "https": tls.server_address[1]}), flush=True)
        sys.stdin.read()  # until EOF
        plain.shutdown()
        tls.shutdown()


if __name__ == "__main__":
    main()
