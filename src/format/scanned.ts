/**
 * Headers read by a native scanner (the Node addon's `scanHeader`, native/header_scan.c), which answers only for a
 * strict, ASCII-only subset of JSON and writes what it found as numbers (records of byte positions and values).
 * Here, a header whose tensors are given in file order, tile the data region and have sizes that match their shapes
 * becomes a `Header` in one lean pass (the scanner has refused headers that repeat a tensor name): opening a file runs this before V8 has optimized anything, so per-tensor work
 * is what a cold open costs. Anything else (another order, a gap, a repeated name or key, an unknown dtype, a size
 * mismatch, numbers beyond 2^53) gives null, and the full reader decides and reports it. For the headers it accepts
 * the result equals the full reader's (tested against it on generated headers).
 */

import { CompactTensors } from "./compact-tensors.js";
import { type DtypeInfo, dtypeInfo } from "./dtypes.js";
import type { Header } from "./header.js";

/** Record tags written by the scanner. */
const TENSOR = 0;
const METADATA_ENTRY = 1;
const METADATA_PRESENT = 2;

const ascii = new TextDecoder("utf-8", { ignoreBOM: true });

/**
 * `records` as the scanner wrote them for `headerBytes` (the N bytes after the length prefix of a file of
 * `fileLength` bytes), or null where the full reader must decide.
 */
export function headerFromScan(records: Float64Array, headerBytes: Uint8Array, fileLength: number): Header | null {
  const headerLength = headerBytes.length;
  const text = ascii.decode(headerBytes);
  // Sized once for the most tensors the records can hold (8 numbers each at least), `count` of them used (grown by
  // push, the two arrays were allocated 7 times each for 48 tensors; cut to length, each cut was a runtime call).
  const most = Math.floor(records.length / 8);
  const dtypes: DtypeInfo[] = new Array(most);
  const starts: number[] = new Array(most);
  let count = 0;
  let metadata: Map<string, string> | null = null;
  let position = 0;
  let info: DtypeInfo | undefined;
  for (let at = 0; at < records.length; ) {
    const tag = records[at++];
    if (tag === METADATA_PRESENT) {
      metadata = new Map();
      continue;
    }
    if (tag === METADATA_ENTRY) {
      const key = text.slice(records[at]!, records[at + 1]!);
      if (metadata === null || metadata.has(key)) return null;
      metadata.set(key, text.slice(records[at + 2]!, records[at + 3]!));
      at += 4;
      continue;
    }
    if (tag !== TENSOR) return null;
    // Dtype names repeat: compare in place with the last one before making a string of it.
    const dtypeStart = records[at + 2]!;
    const dtypeLength = records[at + 3]! - dtypeStart;
    if (info === undefined || dtypeLength !== info.name.length || !text.startsWith(info.name, dtypeStart)) {
      info = dtypeInfo(text.slice(dtypeStart, dtypeStart + dtypeLength));
      if (info === undefined) return null;
    }
    dtypes[count] = info;
    at += 4;
    starts[count++] = at;
    const ndim = records[at++]!;
    let bits = info.bits;
    for (let d = 0; d < ndim; d++) {
      bits *= records[at++]!;
      // Every partial product exact, so that both overflow rules agree: checked only at the end, [10^15 - 1,
      // 10^15 - 1, 0] was taken as an empty tensor where the reference's u64 product overflows (ValidationOverflow).
      if (bits > Number.MAX_SAFE_INTEGER) return null;
    }
    const begin = records[at++]!;
    const end = records[at++]!;
    // In file order, no gap, whole bytes, the span the shape needs.
    if (begin !== position || bits % 8 !== 0 || end - begin !== bits / 8) return null;
    position = end;
  }
  if (position + 8 + headerLength !== fileLength) return null;
  // The records live in a buffer the scanner reuses: keep a copy.
  const tensors = new CompactTensors(text, dtypes, starts, records.slice(), count);
  return new ScannedHeader(headerLength, position, fileLength, metadata, tensors);
}

/** Every header made here is one of these (a class: an object literal with double fields is copied by a runtime call). */
class ScannedHeader implements Header {
  readonly dataStart: number;
  constructor(
    readonly headerLength: number,
    readonly dataLength: number,
    readonly fileLength: number,
    readonly metadata: Map<string, string> | null,
    readonly tensors: CompactTensors,
  ) {
    this.dataStart = 8 + headerLength;
  }
}
