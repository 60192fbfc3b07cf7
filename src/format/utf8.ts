/**
 * Whole-header UTF-8 validation. The core checks in character-aligned pieces with a fatal `TextDecoder` (any runtime);
 * the Node entry installs Node's `buffer.isUtf8` (simdutf), which needs no decoded string at all: a 99 MB ASCII
 * header took ~4 ms against ~70 ms for the pieces, and that check is the whole of our cost on hostile headers the
 * reference fails at their start (its `from_utf8` runs first).
 */

let fastIsUtf8: ((bytes: Uint8Array) => boolean) | undefined;

/** Used by the Node entry point: `validator` must accept exactly the strict UTF-8 of `TextDecoder({fatal: true})`. */
export function installUtf8Validator(validator: (bytes: Uint8Array) => boolean): void {
  fastIsUtf8 = validator;
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** Pieces decoded by the fallback: each is dropped at once, never a header-sized string. */
const UTF8_CHUNK = 1 << 20;

/** Whether `bytes` are valid UTF-8 (the reference's `std::str::from_utf8`). */
export function isValidUtf8(bytes: Uint8Array): boolean {
  if (fastIsUtf8) return fastIsUtf8(bytes);
  return decodesInPieces(bytes);
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
