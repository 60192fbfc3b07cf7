/**
 * Faster routes for the header reader's longest loops, installed by the Node entry point when it has them; the core
 * runs without any (browsers) and gives the same results. On hostile headers of ~100 MB a JavaScript pass costs ~50
 * ms once V8 has optimized it, and seconds when the optimizing compiler gets no free core (a loaded machine): the
 * reference fails some such headers in ~40 ms, Python start-up included.
 *
 * - `isUtf8`: Node's `buffer.isUtf8` (simdutf). A 99 MB ASCII header took ~4 ms, against ~70 ms for the fallback.
 * - `scanRun` and `findSyntaxError`: the native addon's (native/header_scan.c). Neither decides a verdict.
 */
export interface Accelerators {
  /** Must accept exactly the strict UTF-8 of `TextDecoder({fatal: true})` (the reference's `from_utf8`). */
  isUtf8?: (bytes: Uint8Array) => boolean;
  /**
   * The first position at or after `from` whose byte ends a run of `kind`: 0 digits, 1 JSON whitespace, 2 plain
   * string contents (a `"`, `\` or byte below 0x20 ends it).
   */
  scanRun?: (bytes: Uint8Array, from: number, kind: RunKind) => number;
  /**
   * Where a JSON syntax error lies inside the top-level value (grammar, strings and escapes, nesting past 127 levels,
   * end of input; not numbers' ranges), or -1 when it finds none. Only a hint: the reader finds and reports the error.
   */
  findSyntaxError?: (bytes: Uint8Array) => number;
}

export const RUN_DIGITS = 0;
export const RUN_WHITESPACE = 1;
export const RUN_STRING = 2;
export type RunKind = typeof RUN_DIGITS | typeof RUN_WHITESPACE | typeof RUN_STRING;

/** What is installed (read by the reader at each use). */
export const installed: Accelerators = {};

/** Used by the Node entry point. */
export function installAccelerators(accelerators: Accelerators): void {
  Object.assign(installed, accelerators);
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** Pieces decoded by the fallback: each is dropped at once, never a header-sized string. */
const UTF8_CHUNK = 1 << 20;

/** Whether `bytes` are valid UTF-8 (the reference's `std::str::from_utf8`). */
export function isValidUtf8(bytes: Uint8Array): boolean {
  return installed.isUtf8 ? installed.isUtf8(bytes) : decodesInPieces(bytes);
}

/**
 * The fallback. Each piece ends where a character starts, so the pieces are valid exactly when the whole is, and each
 * is decoded on its own (a streaming decoder measured several times slower). Exported for tests.
 */
export function decodesInPieces(bytes: Uint8Array): boolean {
  try {
    for (let at = 0; at < bytes.length; ) {
      let end = Math.min(at + UTF8_CHUNK, bytes.length);
      // Back off continuation bytes (10xxxxxx), at most 3: a longer run is invalid and fails in this piece.
      for (let back = 0; back < 3 && end < bytes.length && (bytes[end]! & 0xc0) === 0x80; back++) end--;
      utf8.decode(bytes.subarray(at, end));
      at = end;
    }
    return true;
  } catch {
    return false;
  }
}
