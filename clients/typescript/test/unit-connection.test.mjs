// Where the client connects and which token it sends: options, the environment, and the
// state root's files, as the Python client decides it (clients/python/nsbox/_http.py).
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";

import { Client, Unauthorized, defaultSocketPath, tokenFileForSocket } from "nsbox";

function stateRoot(token) {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "nsbox-ts-unit-"));
  fs.mkdirSync(path.join(root, "run"));
  fs.mkdirSync(path.join(root, "data", "api"), { recursive: true });
  if (token !== undefined) fs.writeFileSync(path.join(root, "data", "api", "token"), token);
  return root;
}

test("a url option is the TCP server and a unix: url is a socket", () => {
  const tcp = new Client({ url: "http://127.0.0.1:8080", token: "t", env: {} });
  assert.equal(tcp.url, "http://127.0.0.1:8080");
  assert.equal(tcp.socketPath, undefined);
  assert.equal(tcp.where, "http://127.0.0.1:8080");
  for (const url of ["unix:/x/run/api.sock", "unix:///x/run/api.sock", "unix://localhost/x/run/api.sock"]) {
    const c = new Client({ url, token: "t", env: {} });
    assert.equal(c.socketPath, "/x/run/api.sock", url);
    assert.equal(c.url, undefined);
    assert.equal(c.where, "unix:/x/run/api.sock");
  }
});

test("urls with a path, another scheme, or both url and socket are refused", () => {
  assert.throws(() => new Client({ url: "http://127.0.0.1:8080/v1", token: "t", env: {} }), /has no path/);
  assert.throws(() => new Client({ url: "https://127.0.0.1:8080", token: "t", env: {} }), /http:\/\/HOST:PORT/);
  assert.throws(() => new Client({ url: "http://a:1", socket: "/s", token: "t", env: {} }), /not both/);
});

test("NSBOX_URL wins over NSBOX_SOCKET, and options over both", () => {
  const env = { NSBOX_URL: "http://127.0.0.1:9", NSBOX_SOCKET: "/y/api.sock", NSBOX_TOKEN: "t" };
  assert.equal(new Client({ env }).url, "http://127.0.0.1:9");
  assert.equal(new Client({ env: { NSBOX_SOCKET: "/y/api.sock", NSBOX_TOKEN: "t" } }).socketPath, "/y/api.sock");
  assert.equal(new Client({ socket: "/z/api.sock", env }).socketPath, "/z/api.sock");
});

test("a socket of a state root finds the token next to it", () => {
  const root = stateRoot("secret-token\nsecond line ignored\n");
  try {
    const socket = path.join(root, "run", "api.sock");
    assert.equal(tokenFileForSocket(socket, {}), path.join(root, "data", "api", "token"));
    const c = new Client({ socket, env: {} });
    assert.equal(c.tokenFile, path.join(root, "data", "api", "token"));
    assert.equal(c.hasToken, true);
  } finally {
    fs.rmSync(root, { recursive: true });
  }
});

test("NSBOX_ROOT names the default socket and token file", () => {
  const root = stateRoot("tok");
  try {
    const env = { NSBOX_ROOT: root };
    assert.equal(defaultSocketPath(env), path.join(root, "run", "api.sock"));
    const c = new Client({ env });
    assert.equal(c.socketPath, path.join(root, "run", "api.sock"));
    assert.equal(c.tokenFile, path.join(root, "data", "api", "token"));
    assert.equal(c.hasToken, true);
  } finally {
    fs.rmSync(root, { recursive: true });
  }
});

test("the default state root is root's for root and the XDG directories otherwise", () => {
  const env = { XDG_RUNTIME_DIR: "/run/user/1000", XDG_DATA_HOME: "/home/u/.data" };
  if (process.geteuid() === 0) {
    assert.equal(defaultSocketPath(env), "/run/nsbox/api.sock");
    assert.equal(tokenFileForSocket(undefined, env), "/var/lib/nsbox/api/token");
  } else {
    assert.equal(defaultSocketPath(env), "/run/user/1000/nsbox/api.sock");
    assert.equal(tokenFileForSocket(undefined, env), "/home/u/.data/nsbox/api/token");
  }
  assert.equal(tokenFileForSocket("/run/nsbox/api.sock", env), "/var/lib/nsbox/api/token");
});

test("a token file that was named but is missing or empty is an Unauthorized error before any request", () => {
  const root = stateRoot("");
  try {
    const missing = path.join(root, "nothing");
    assert.throws(() => new Client({ socket: "/s", tokenFile: missing, env: {} }),
      (e) => e instanceof Unauthorized && e.status === undefined && e.message.includes(missing));
    assert.throws(() => new Client({ socket: "/s", env: { NSBOX_TOKEN_FILE: missing } }), Unauthorized);
    const empty = path.join(root, "data", "api", "token");
    assert.throws(() => new Client({ socket: "/s", tokenFile: empty, env: {} }),
      (e) => e instanceof Unauthorized && /is empty/.test(e.message) && /nsbox serve/.test(e.hint));
  } finally {
    fs.rmSync(root, { recursive: true });
  }
});

test("without any token file the client sends no token (the server says what to do)", () => {
  const root = stateRoot();
  try {
    const c = new Client({ socket: path.join(root, "run", "api.sock"), env: {} });
    assert.equal(c.hasToken, false);
  } finally {
    fs.rmSync(root, { recursive: true });
  }
});

test("NSBOX_TOKEN is used as given and no file is read", () => {
  const c = new Client({ socket: "/nowhere/api.sock", env: { NSBOX_TOKEN: "abc" } });
  assert.equal(c.hasToken, true);
  assert.equal(c.tokenFile, undefined);
});
