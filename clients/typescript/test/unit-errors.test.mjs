// Errors by code: every code of the API has its class, with the status of the server's
// one table (api/http_errors.cc), under the Python client's class names.
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import * as nsbox from "nsbox";

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const read = (p) => fs.readFileSync(path.join(repo, p), "utf8");

// api/http_errors.cc: {ErrorCode::kMalformedRequest, 400}, ... → {malformed_request: 400}
function serverStatuses() {
  const table = {};
  for (const [, name, status] of read("api/http_errors.cc").matchAll(/\{ErrorCode::k(\w+), (\d+)\}/g)) {
    table[name.replace(/[A-Z]/g, (c, i) => (i ? "_" : "") + c.toLowerCase())] = Number(status);
  }
  return table;
}

// clients/python/nsbox/errors.py: class Name(Base): ... code = "x"
function pythonClasses() {
  const classes = {};
  for (const [, name, body] of read("clients/python/nsbox/errors.py").matchAll(/^class (\w+)\([^)]*\):\n((?:    .*\n|\n)*)/gm)) {
    const code = body.match(/^    code = "(\w+)"/m);
    if (code) classes[name] = code[1];
  }
  return classes;
}

test("every code of the server's table has a class with the server's status", () => {
  const table = serverStatuses();
  assert.ok(Object.keys(table).length >= 19, JSON.stringify(table));
  for (const [code, status] of Object.entries(table)) {
    const Class = nsbox.errorClass(code);
    assert.notEqual(Class, nsbox.NsboxError, `no class for ${code}`);
    assert.equal(Class.code, code);
    assert.equal(Class.defaultStatus, status, code);
    const e = nsbox.errorFromDocument({ code, message: "m" }, status);
    assert.ok(e instanceof Class && e instanceof nsbox.NsboxError && e instanceof Error);
    assert.equal(e.code, code);
  }
});

test("the OpenAPI document's error codes are the server's table's", () => {
  const spec = read("api/openapi.yaml");
  const listed = spec.match(/ErrorCode:\n(?:.*\n)*?\s+enum: \[([^\]]+)\]/)[1].split(",").map((s) => s.trim());
  assert.deepEqual([...listed].sort(), Object.keys(serverStatuses()).sort());
});

test("the classes have the Python client's names and codes", () => {
  const python = pythonClasses();
  assert.ok(Object.keys(python).length >= 19, JSON.stringify(python));
  for (const [name, code] of Object.entries(python)) {
    assert.equal(typeof nsbox[name], "function", `nsbox.${name} is missing`);
    assert.equal(nsbox[name].code, code, name);
  }
  assert.equal(nsbox.QuotaExceeded, nsbox.LimitExceeded);
  assert.ok(new nsbox.OwnerUnavailable("x") instanceof nsbox.Unavailable);
  assert.ok(new nsbox.ServerUnreachable("x") instanceof nsbox.Unavailable);
  assert.equal(new nsbox.ServerUnreachable("x").status, undefined);
});

test("an error answer becomes its class with message, hint, status and body", () => {
  const body = Buffer.from(JSON.stringify({ error: { code: "not_found", message: "no sandbox sbx-1", hint: "nsbox ls" } }));
  const e = nsbox.errorFromResponse(404, body);
  assert.ok(e instanceof nsbox.NotFound);
  assert.equal(e.name, "NotFound");
  assert.equal(e.message, "no sandbox sbx-1");
  assert.equal(e.hint, "nsbox ls");
  assert.equal(e.status, 404);
  assert.deepEqual(e.body, { code: "not_found", message: "no sandbox sbx-1", hint: "nsbox ls" });
});

test("moved and owner_unavailable carry the snapshot to restore", () => {
  const moved = nsbox.errorFromResponse(410, Buffer.from(JSON.stringify({ error: { code: "moved", message: "m", snapshot: "snp-1" } })));
  assert.ok(moved instanceof nsbox.Moved);
  assert.equal(moved.snapshot, "snp-1");
  const owner = nsbox.errorFromDocument({ code: "owner_unavailable", message: "m", snapshot: "snp-2" }, 503);
  assert.ok(owner instanceof nsbox.OwnerUnavailable);
  assert.equal(owner.snapshot, "snp-2");
});

test("a code this client does not know is an NsboxError that keeps the code", () => {
  const e = nsbox.errorFromResponse(418, Buffer.from(JSON.stringify({ error: { code: "teapot", message: "short and stout" } })));
  assert.equal(e.constructor, nsbox.NsboxError);
  assert.equal(e.code, "teapot");
  assert.equal(e.status, 418);
});

test("an answer without an error document is classed by its status", () => {
  const e = nsbox.errorFromResponse(503, Buffer.from("<html>busy</html>"));
  assert.ok(e instanceof nsbox.Unavailable);
  assert.match(e.message, /HTTP 503 .*<html>busy<\/html>/);
  const other = nsbox.errorFromResponse(599, Buffer.from(""));
  assert.ok(other instanceof nsbox.ProtocolError);
  assert.equal(other.status, 599);
  const notObject = nsbox.errorFromDocument("oops", 500);
  assert.ok(notObject instanceof nsbox.ProtocolError);
});
