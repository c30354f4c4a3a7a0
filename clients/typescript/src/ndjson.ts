/**
 * NDJSON as the server streams it (`Accept: application/x-ndjson`): one JSON object per
 * line. Lines are cut from bytes, not text, so a character split between two chunks is
 * whole again before it is decoded; a line longer than the bound is refused instead of
 * growing without end.
 */
import { ProtocolError } from "./errors.js";

const NEWLINE = 0x0a;

/** Splits a byte stream into lines (without their `\n`), each at most `maxLineBytes`. */
export class LineSplitter {
  private pending: Buffer[] = [];
  private pendingBytes = 0;

  constructor(readonly maxLineBytes: number) {}

  /** The lines completed by `chunk`. */
  push(chunk: Uint8Array): Buffer[] {
    const lines: Buffer[] = [];
    let data = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    for (;;) {
      const end = data.indexOf(NEWLINE);
      if (end < 0) {
        this.keep(data);
        return lines;
      }
      this.keep(data.subarray(0, end));
      lines.push(this.pending.length === 1 ? this.pending[0]! : Buffer.concat(this.pending, this.pendingBytes));
      this.pending = [];
      this.pendingBytes = 0;
      data = data.subarray(end + 1);
    }
  }

  /** What is left after the last `\n` (empty when the stream ended on a line's end). */
  rest(): Buffer {
    return Buffer.concat(this.pending, this.pendingBytes);
  }

  private keep(part: Buffer): void {
    if (part.length === 0) return;
    if (this.pendingBytes + part.length > this.maxLineBytes) {
      throw new ProtocolError(`a stream line from nsbox is longer than ${this.maxLineBytes} bytes`);
    }
    this.pending.push(part);
    this.pendingBytes += part.length;
  }
}

/** One stream line as an event object; undefined for a blank line. */
export function parseEventLine(line: Uint8Array): Record<string, unknown> | undefined {
  const text = Buffer.from(line.buffer, line.byteOffset, line.byteLength).toString("utf8").trim();
  if (!text) return undefined;
  let event: unknown;
  try {
    event = JSON.parse(text);
  } catch (e) {
    throw new ProtocolError(`a stream line from nsbox is not JSON: ${(e as Error).message}`);
  }
  if (event === null || typeof event !== "object" || Array.isArray(event)) {
    throw new ProtocolError("a stream line from nsbox is not an object");
  }
  return event as Record<string, unknown>;
}
