/**
 * CRC-32C (Castagnoli), the checksum of the undo journal's records, in JavaScript: what runs without the native addon
 * (which computes the same values with the CPU's CRC32 instruction, `native/journal.c`). Slicing by 8 over a table
 * built on first use. Pure.
 */

const POLY = 0x82f63b78;
let tables: Uint32Array | null = null;

function buildTables(): Uint32Array {
  const t = new Uint32Array(8 * 256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ POLY : c >>> 1;
    t[n] = c >>> 0;
  }
  for (let n = 0; n < 256; n++) {
    for (let k = 1; k < 8; k++) {
      const prev = t[(k - 1) * 256 + n]!;
      t[k * 256 + n] = (prev >>> 8) ^ t[prev & 0xff]!;
    }
  }
  return t;
}

/** CRC-32C of `bytes` continuing `crc` (0 to start): `crc32c(b, crc32c(a))` is the CRC of `a` then `b`. */
export function crc32c(bytes: Uint8Array, crc = 0): number {
  tables ??= buildTables();
  const t = tables;
  let c = ~crc >>> 0;
  let i = 0;
  const n = bytes.length;
  for (; i + 8 <= n; i += 8) {
    const lo = c ^ (bytes[i]! | (bytes[i + 1]! << 8) | (bytes[i + 2]! << 16) | (bytes[i + 3]! << 24));
    c =
      t[7 * 256 + (lo & 0xff)]! ^
      t[6 * 256 + ((lo >>> 8) & 0xff)]! ^
      t[5 * 256 + ((lo >>> 16) & 0xff)]! ^
      t[4 * 256 + (lo >>> 24)]! ^
      t[3 * 256 + bytes[i + 4]!]! ^
      t[2 * 256 + bytes[i + 5]!]! ^
      t[256 + bytes[i + 6]!]! ^
      t[bytes[i + 7]!]!;
  }
  for (; i < n; i++) c = (c >>> 8) ^ t[(c ^ bytes[i]!) & 0xff]!;
  return ~c >>> 0;
}
