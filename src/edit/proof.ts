/**
 * Proof of locality for in-place edits: SHA-256 of a span of the file before a write, of what the span must be after
 * it (the same bytes with only the written ranges replaced), and of what it is after. When "after" equals
 * "expected", every byte of the span outside the written ranges is unchanged and the ranges hold exactly the intended
 * bytes. Streaming (one 8 MiB buffer), so a span may be the whole file. Node-only.
 */
import { createHash, type Hash } from "node:crypto";
import { SafetensorError } from "../format/errors.js";
import { preadInto } from "../io/node-file.js";

const CHUNK = 8 << 20;

/** New bytes at absolute file offsets (sorted by offset, disjoint). */
export interface Overlay {
  readonly offset: number;
  readonly bytes: Uint8Array;
}

export interface SpanDigests {
  /** SHA-256 (hex) of the span as it is. */
  readonly before: string;
  /** SHA-256 (hex) of the span with the overlays laid over it. */
  readonly expected: string;
}

function each(fd: number, start: number, end: number, fn: (chunk: Uint8Array, at: number) => void): void {
  const buffer = new Uint8Array(Math.min(CHUNK, Math.max(end - start, 0)));
  for (let at = start; at < end; at += buffer.length) {
    const chunk = buffer.subarray(0, Math.min(buffer.length, end - at));
    preadInto(fd, chunk, at);
    fn(chunk, at);
  }
}

/** SHA-256 of bytes `[start, end)` of `fd` now, and of the same bytes with `overlays` applied. */
export function spanDigests(fd: number, start: number, end: number, overlays: readonly Overlay[]): SpanDigests {
  const before = createHash("sha256");
  const expected = createHash("sha256");
  let first = 0;
  each(fd, start, end, (chunk, at) => {
    before.update(chunk);
    const chunkEnd = at + chunk.length;
    while (first < overlays.length && overlays[first]!.offset + overlays[first]!.bytes.length <= at) first++;
    for (let i = first; i < overlays.length && overlays[i]!.offset < chunkEnd; i++) {
      const o = overlays[i]!;
      const from = Math.max(o.offset, at);
      const to = Math.min(o.offset + o.bytes.length, chunkEnd);
      if (from < to) chunk.set(o.bytes.subarray(from - o.offset, to - o.offset), from - at);
    }
    expected.update(chunk);
  });
  return { before: before.digest("hex"), expected: expected.digest("hex") };
}

/** SHA-256 (hex) of bytes `[start, end)` of `fd`. */
export function spanDigest(fd: number, start: number, end: number): string {
  const hash: Hash = createHash("sha256");
  each(fd, start, end, (chunk) => hash.update(chunk));
  return hash.digest("hex");
}

/** `VerificationFailed` unless the span's digest after the write is the expected one. */
export function checkSpan(what: string, digests: SpanDigests, after: string, tensor: string): void {
  if (after !== digests.expected) {
    throw new SafetensorError(
      "VerificationFailed",
      `${what} after the write is not the old content with only the written ranges replaced ` +
        `(SHA-256 ${after}, expected ${digests.expected}): another writer, or a failing disk? The edit is not ` +
        "committed: roll it back",
      { tensor },
    );
  }
}
