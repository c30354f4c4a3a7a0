// NDJSON lines cut from bytes: a line (and a character) split across chunks is whole
// again, and a line past the bound is refused.
import assert from "node:assert/strict";
import { test } from "node:test";

import { LineSplitter, ProtocolError, parseEventLine } from "nsbox";

const decode = (lines) => lines.map((l) => l.toString("utf8"));

test("lines split across chunks, a multi-byte character among them, come out whole", () => {
  const text = '{"type":"stdout","text":"d\u00e9j\u00e0 vu \u{1F600}"}\n{"type":"heartbeat"}\n\n{"type":"result"}\n';
  const bytes = Buffer.from(text, "utf8");
  // Every way of cutting the stream in two, and one byte at a time.
  for (let cut = 0; cut <= bytes.length; cut++) {
    const s = new LineSplitter(1024);
    const lines = [...s.push(bytes.subarray(0, cut)), ...s.push(bytes.subarray(cut))];
    assert.deepEqual(decode(lines), text.split("\n").slice(0, -1), `cut at ${cut}`);
    assert.equal(s.rest().length, 0);
  }
  const s = new LineSplitter(1024);
  const lines = [];
  for (const byte of bytes) lines.push(...s.push(Uint8Array.of(byte)));
  assert.equal(parseEventLine(lines[0]).text, "d\u00e9j\u00e0 vu \u{1F600}");
  assert.equal(parseEventLine(lines[2]), undefined);
  assert.deepEqual(parseEventLine(lines[3]), { type: "result" });
});

test("what follows the last newline is kept for the end of the stream", () => {
  const s = new LineSplitter(64);
  assert.deepEqual(decode(s.push(Buffer.from('{"a":1}\n{"b"'))), ['{"a":1}']);
  assert.deepEqual(decode(s.push(Buffer.from(":2}"))), []);
  assert.equal(s.rest().toString(), '{"b":2}');
});

test("a line longer than the bound is refused, even when it comes in small pieces", () => {
  const s = new LineSplitter(16);
  assert.deepEqual(decode(s.push(Buffer.from("0123456789abcdef\n"))), ["0123456789abcdef"]);
  s.push(Buffer.from("0123456789"));
  assert.throws(() => s.push(Buffer.from("abcdefg")), (e) => e instanceof ProtocolError && /longer than 16 bytes/.test(e.message));
});

test("a line that is not a JSON object is a protocol error", () => {
  assert.throws(() => parseEventLine(Buffer.from("{not json")), ProtocolError);
  assert.throws(() => parseEventLine(Buffer.from("[1, 2]")), /not an object/);
  assert.throws(() => parseEventLine(Buffer.from("null")), /not an object/);
});
