/**
 * Hostile safetensors headers, as descriptions that build a file of any size: long strings and escapes, millions of
 * tiny or invalid entries, deep and unbalanced nesting, long numbers, huge shapes, duplicate keys and fields, huge
 * ignored values. The benchmark (bench/hostile.ts) builds them near the 100 MB header limit; the tests build them
 * small (test/hostile.test.ts) and compare with the reference's verdicts recorded by scripts/gen_hostile_verdicts.ts.
 */

/** Where the reference and we deliberately differ: it keeps the last of repeated names, we refuse them. */
export type Stricter = "DuplicateKey";

export interface HostileCase {
  readonly id: string;
  readonly what: string;
  /** Header text (or bytes, for invalid UTF-8) of about `size` bytes, and the data region's length. */
  build(size: number): { header: string | Uint8Array; data: number };
  /** Set when our verdict is deliberately stricter than the reference's. */
  readonly stricter?: Stricter;
  /** Also tested at {@link MEDIUM_SIZE}: shapes whose failures only showed past a few million characters. */
  readonly medium?: true;
}

/** Largest header the default `maxHeaderBytes` (and the reference) accepts; full-size cases stay below it. */
export const FULL_SIZE = 99_000_000;
/** The size every case is tested at. */
export const SMALL_SIZE = 65_536;
/** Past the ~8.4 M-character string at which a backtracking regular expression once overflowed the stack. */
export const MEDIUM_SIZE = 9_000_000;

/** The sizes the test suite builds a case at. */
export function testSizes(hostile: HostileCase): number[] {
  return hostile.medium ? [SMALL_SIZE, MEDIUM_SIZE] : [SMALL_SIZE];
}

const F32 = '"dtype":"F32","shape":[1],"data_offsets":[0,4]';
/** One valid 4-byte tensor. */
const T = `{${F32}}`;

/** `count` repetitions that fit `size` bytes after `fixed` bytes of framing, at least 1. */
function fit(size: number, unit: number, fixed = 64): number {
  return Math.max(1, Math.floor((size - fixed) / unit));
}

/** `"prefix0":v,"prefix1":v,…` for as many numbered members as fit. */
function members(size: number, value: (i: number) => string, prefix = "k"): string {
  const unit = `"${prefix}${Math.floor(size / 20)}":${value(0)},`.length;
  const parts: string[] = [];
  for (let i = 0, n = fit(size, unit); i < n; i++) parts.push(`"${prefix}${i}":${value(i)}`);
  return parts.join(",");
}

/** A valid file whose one tensor carries `extra` as an ignored field. */
function ignored(extra: string): { header: string; data: number } {
  return { header: `{"t":{${F32},"x":${extra}}}`, data: 4 };
}

const valid = (header: string) => ({ header, data: 4 });

const a = (size: number) => "a".repeat(Math.max(1, size - 80));

export const HOSTILE_CASES: readonly HostileCase[] = [
  // ---------------------------------------------------------------------------------------------- long strings
  {
    id: "long-name",
    medium: true,
    what: "one tensor name of ~all the header",
    build: (s) => valid(`{"${a(s)}":${T}}`),
  },
  {
    id: "long-metadata-value",
    medium: true,
    what: "one metadata value of ~all the header",
    build: (s) => valid(`{"__metadata__":{"k":"${a(s)}"},"t":${T}}`),
  },
  {
    id: "long-metadata-key",
    what: "one metadata key of ~all the header",
    build: (s) => valid(`{"__metadata__":{"${a(s)}":"v"},"t":${T}}`),
  },
  {
    id: "long-ignored-string",
    medium: true,
    what: "an ignored field holding one long string",
    build: (s) => ignored(`"${a(s)}"`),
  },
  {
    id: "long-escapes-simple",
    what: "a metadata value made of `\\n` escapes",
    build: (s) => valid(`{"__metadata__":{"k":"${"\\n".repeat(fit(s, 2))}"},"t":${T}}`),
  },
  {
    id: "long-escapes-unicode",
    medium: true,
    what: "a tensor name made of `\\u0041` escapes",
    build: (s) => valid(`{"${"\\u0041".repeat(fit(s, 6))}":${T}}`),
  },
  {
    id: "long-surrogate-pairs",
    medium: true,
    what: "a tensor name made of escaped surrogate pairs",
    build: (s) => valid(`{"${"\\ud83d\\ude00".repeat(fit(s, 12))}":${T}}`),
  },
  {
    id: "long-escaped-quotes",
    medium: true,
    what: 'an ignored string of `\\\\` and `\\"` escapes',
    build: (s) => ignored(`"${'\\\\\\"'.repeat(fit(s, 4))}"`),
  },
  {
    id: "long-lone-surrogate-last",
    what: "a long metadata value ending in a lone surrogate escape",
    build: (s) => valid(`{"__metadata__":{"k":"${a(s)}\\ud800"},"t":${T}}`),
  },
  {
    id: "long-unterminated-string",
    what: "a string running to the end of the header",
    build: (s) => valid(`{"t":${T},"${a(s)}`),
  },
  {
    id: "long-control-char-last",
    what: "a long name ending in a raw control character",
    build: (s) => valid(`{"${a(s)}\u0001":${T}}`),
  },
  {
    id: "long-non-ascii-name",
    what: "a tensor name of 2-byte UTF-8 characters",
    build: (s) => valid(`{"${"é".repeat(fit(s, 2))}":${T}}`),
  },
  {
    id: "long-ascii-then-emoji",
    what: "a long ASCII name with one 4-byte character at its end",
    build: (s) => valid(`{"${a(s)}😀":${T}}`),
  },
  {
    id: "long-dtype",
    what: "a dtype name of ~all the header",
    build: (s) => valid(`{"t":{"dtype":"${"F".repeat(fit(s, 1, 80))}","shape":[1],"data_offsets":[0,4]}}`),
  },
  {
    id: "invalid-utf8-last",
    what: "a long name with an invalid UTF-8 byte at its end",
    build: (s) => {
      const text = new TextEncoder().encode(`{"${a(s)}\u0000":${T}}`);
      text[text.indexOf(0)] = 0xff;
      return { header: text, data: 4 };
    },
  },

  // ---------------------------------------------------------------------------------------------- many entries
  {
    id: "many-empty-entries",
    medium: true,
    what: "millions of `{}` tensor entries",
    build: (s) => valid(`{${members(s, () => "{}")}}`),
  },
  {
    id: "many-number-entries",
    what: "millions of tensors given as `1`",
    build: (s) => valid(`{${members(s, () => "1")}}`),
  },
  {
    id: "many-unknown-dtypes",
    what: "millions of entries with an unknown dtype",
    build: (s) => valid(`{${members(s, () => '{"dtype":"XX","shape":[],"data_offsets":[0,0]}')}}`),
  },
  {
    id: "many-zero-size-tensors",
    what: "millions of valid zero-size tensors",
    build: (s) => valid(`{${members(s, () => '{"dtype":"U8","shape":[0],"data_offsets":[0,0]}')},"t":${T}}`),
  },
  {
    id: "many-one-byte-tensors",
    what: "millions of valid 1-byte tensors, in reverse offset order",
    build: (s) => {
      const unit = `"k${Math.floor(s / 20)}":{"dtype":"U8","shape":[1],"data_offsets":[${s / 50},${s / 50}]},`.length;
      const n = fit(s, unit);
      const parts: string[] = [];
      for (let i = n - 1; i >= 0; i--) parts.push(`"k${i}":{"dtype":"U8","shape":[1],"data_offsets":[${i},${i + 1}]}`);
      return { header: `{${parts.join(",")}}`, data: n };
    },
  },
  {
    id: "many-overlapping-offsets",
    what: "millions of tensors all at [0, 1)",
    build: (s) => ({ header: `{${members(s, () => '{"dtype":"U8","shape":[1],"data_offsets":[0,1]}')}}`, data: 1 }),
  },
  {
    id: "many-array-form-entries",
    what: 'millions of entries in the array form `["U8",[0],[0,0]]`',
    build: (s) => valid(`{${members(s, () => '["U8",[0],[0,0]]')},"t":${T}}`),
  },
  {
    id: "many-metadata-entries",
    what: "millions of metadata entries",
    build: (s) => valid(`{"__metadata__":{${members(s, () => '"v"')}},"t":${T}}`),
  },
  {
    id: "many-entries-bad-last",
    what: "millions of valid entries, the last one missing its dtype",
    build: (s) =>
      valid(
        `{${members(s, () => '{"dtype":"U8","shape":[0],"data_offsets":[0,0]}')},"t":${T},"z":{"shape":[0],"data_offsets":[4,4]}}`,
      ),
  },
  {
    id: "many-entries-trailing-garbage",
    what: "millions of valid entries, then a stray character",
    build: (s) => valid(`{${members(s, () => '{"dtype":"U8","shape":[0],"data_offsets":[0,0]}')},"t":${T}}x`),
  },
  {
    id: "many-entries-lone-surrogate-last",
    what: "millions of valid entries, the last name a lone surrogate escape",
    build: (s) =>
      valid(`{${members(s, () => '{"dtype":"U8","shape":[0],"data_offsets":[0,0]}')},"t":${T},"\\udc00":{}}`),
  },

  // ---------------------------------------------------------------------------------------------- nesting
  {
    id: "deep-array-top",
    what: "the whole header one deeply nested array",
    build: (s) => valid(`${"[".repeat(fit(s, 2, 0))}${"]".repeat(fit(s, 2, 0))}`),
  },
  {
    id: "deep-array-ignored",
    medium: true,
    what: "deeply nested arrays in an ignored field",
    build: (s) => ignored(`${"[".repeat(fit(s, 2))}${"]".repeat(fit(s, 2))}`),
  },
  {
    id: "deep-object-ignored",
    what: 'deeply nested objects `{"a":{"a":…}}` in an ignored field',
    build: (s) => ignored(`${'{"a":'.repeat(fit(s, 6))}1${"}".repeat(fit(s, 6))}`),
  },
  {
    id: "deep-array-entry",
    what: "a tensor entry that is a deeply nested array",
    build: (s) => valid(`{"t":${"[".repeat(fit(s, 2))}${"]".repeat(fit(s, 2))}}`),
  },
  {
    id: "deep-array-metadata",
    what: "a metadata value that is a deeply nested array",
    build: (s) => valid(`{"__metadata__":{"k":${"[".repeat(fit(s, 2))}${"]".repeat(fit(s, 2))}},"t":${T}}`),
  },
  {
    id: "deep-unbalanced-open",
    what: "an ignored field opening arrays to the end of the header",
    build: (s) => valid(`{"t":{${F32},"x":${"[".repeat(fit(s, 1))}`),
  },
  {
    id: "deep-unbalanced-close",
    what: "a valid object followed by millions of `]`",
    build: (s) => valid(`{"t":${T}}${"]".repeat(fit(s, 1))}`),
  },
  {
    id: "nesting-127-repeated",
    what: "an ignored array of many arrays nested to exactly the 127-level limit",
    build: (s) => {
      const inner = `${"[".repeat(124)}${"]".repeat(124)}`;
      return ignored(
        `[${Array(fit(s, inner.length + 1))
          .fill(inner)
          .join(",")}]`,
      );
    },
  },
  {
    id: "nesting-128",
    what: "an ignored value nested one level past the limit",
    build: () => ignored(`${"[".repeat(126)}${"]".repeat(126)}`),
  },

  // ---------------------------------------------------------------------------------------------- numbers
  {
    id: "long-int-shape",
    what: "a shape dim of ~all the header in digits",
    build: (s) => valid(`{"t":{"dtype":"F32","shape":[1${"0".repeat(fit(s, 1))}],"data_offsets":[0,4]}}`),
  },
  {
    id: "long-int-offsets",
    what: "a data offset of ~all the header in digits",
    build: (s) => valid(`{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4${"0".repeat(fit(s, 1))}]}}`),
  },
  {
    id: "long-int-ignored",
    medium: true,
    what: "an ignored integer of ~all the header in digits",
    build: (s) => ignored(`9${"9".repeat(fit(s, 1))}`),
  },
  {
    id: "long-negative-int-ignored",
    what: "an ignored negative integer of ~all the header in digits",
    build: (s) => ignored(`-9${"9".repeat(fit(s, 1))}`),
  },
  {
    id: "long-fraction-ignored",
    what: "an ignored float with ~all the header as fraction digits",
    build: (s) => ignored(`1.${"7".repeat(fit(s, 1))}`),
  },
  {
    id: "long-fraction-zeros-ignored",
    what: "an ignored float 0.000…0001",
    build: (s) => ignored(`0.${"0".repeat(fit(s, 1))}1`),
  },
  {
    id: "long-float-shape",
    what: "a shape dim that is a float with millions of digits",
    build: (s) => valid(`{"t":{"dtype":"F32","shape":[1.${"0".repeat(fit(s, 1))}],"data_offsets":[0,4]}}`),
  },
  {
    id: "long-exponent-ignored",
    medium: true,
    what: "an ignored 1e999…9",
    build: (s) => ignored(`1e${"9".repeat(fit(s, 1))}`),
  },
  {
    id: "long-negative-exponent-ignored",
    what: "an ignored 1e-999…9",
    build: (s) => ignored(`1e-${"9".repeat(fit(s, 1))}`),
  },
  {
    id: "long-int-times-small-exponent",
    what: "an ignored integer of millions of digits times 1e-(as many)",
    build: (s) => {
      const n = fit(s, 2);
      return ignored(`1${"0".repeat(n)}e-${n}`);
    },
  },
  {
    id: "long-leading-zeros",
    what: "an ignored number 000…0",
    build: (s) => ignored(`0${"0".repeat(fit(s, 1))}`),
  },
  {
    id: "many-floats-ignored",
    what: "an ignored array of millions of floats",
    build: (s) => ignored(`[${Array(fit(s, 4)).fill("1.5").join(",")}]`),
  },
  {
    id: "many-negative-ints-ignored",
    what: "an ignored array of millions of negative integers",
    build: (s) => ignored(`[${Array(fit(s, 3)).fill("-1").join(",")}]`),
  },
  {
    id: "many-ints-ignored",
    what: "an ignored array of millions of small integers",
    build: (s) => ignored(`[${Array(fit(s, 2)).fill("1").join(",")}]`),
  },
  {
    id: "many-near-max-floats-ignored",
    what: "an ignored array of millions of floats near the largest double",
    build: (s) => ignored(`[${Array(fit(s, 24)).fill("1.7976931348623157e308").join(",")}]`),
  },

  // ---------------------------------------------------------------------------------------------- shapes
  {
    id: "huge-shape-ones",
    what: "a shape of millions of 1s (valid)",
    build: (s) => valid(`{"t":{"dtype":"F32","shape":[${Array(fit(s, 2)).fill(1).join(",")}],"data_offsets":[0,4]}}`),
  },
  {
    id: "huge-shape-twos",
    what: "a shape of millions of 2s (overflows)",
    build: (s) => valid(`{"t":{"dtype":"F32","shape":[${Array(fit(s, 2)).fill(2).join(",")}],"data_offsets":[0,4]}}`),
  },
  {
    id: "huge-shape-zeros",
    what: "a shape of millions of 0s (an empty tensor)",
    build: (s) => ({
      header: `{"t":{"dtype":"F32","shape":[${Array(fit(s, 2)).fill(0).join(",")}],"data_offsets":[0,0]}}`,
      data: 0,
    }),
  },
  {
    id: "huge-shape-big-dims-then-zero",
    what: "a shape of millions of 2^40 dims, then a 0 (the reference overflows first)",
    build: (s) => ({
      header: `{"t":{"dtype":"F32","shape":[${Array(fit(s, 14))
        .fill(2 ** 40)
        .join(",")},0],"data_offsets":[0,0]}}`,
      data: 0,
    }),
  },
  {
    id: "huge-shape-mismatch",
    what: "a shape of millions of 1s and a final 2, offsets for 1 element",
    build: (s) => valid(`{"t":{"dtype":"F32","shape":[${Array(fit(s, 2)).fill(1).join(",")},2],"data_offsets":[0,4]}}`),
  },
  {
    id: "huge-shape-negative-last",
    what: "a shape of millions of 1s and a final -1",
    build: (s) =>
      valid(`{"t":{"dtype":"F32","shape":[${Array(fit(s, 2)).fill(1).join(",")},-1],"data_offsets":[0,4]}}`),
  },
  {
    id: "huge-offsets-list",
    what: "data_offsets with millions of elements",
    build: (s) => valid(`{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4,${Array(fit(s, 2)).fill(4).join(",")}]}}`),
  },

  // ---------------------------------------------------------------------------------------------- duplicates
  {
    id: "dup-tensor-names",
    what: "one tensor name repeated millions of times",
    build: (s) =>
      valid(
        `{${Array(fit(s, T.length + 5))
          .fill(`"t":${T}`)
          .join(",")}}`,
      ),
    stricter: "DuplicateKey",
  },
  {
    id: "dup-fields",
    medium: true,
    what: "a tensor entry repeating its dtype field millions of times",
    build: (s) =>
      valid(`{"t":{${Array(fit(s, 14)).fill('"dtype":"F32"').join(",")},"shape":[1],"data_offsets":[0,4]}}`),
  },
  {
    id: "dup-metadata-keys",
    what: "one metadata key repeated millions of times",
    build: (s) => valid(`{"__metadata__":{${Array(fit(s, 8)).fill('"k":"v"').join(",")}},"t":${T}}`),
    stricter: "DuplicateKey",
  },
  {
    id: "dup-metadata-field",
    what: "`__metadata__` repeated millions of times",
    build: (s) => valid(`{${Array(fit(s, 18)).fill('"__metadata__":{}').join(",")},"t":${T}}`),
  },
  {
    id: "dup-ignored-keys",
    what: "an ignored object repeating one key millions of times",
    build: (s) => ignored(`{${Array(fit(s, 6)).fill('"k":1').join(",")}}`),
  },

  // ---------------------------------------------------------------------------------------------- huge ignored values
  {
    id: "huge-ignored-object",
    what: "an ignored object of millions of keys",
    build: (s) => ignored(`{${members(s, () => "0")}}`),
  },
  {
    id: "huge-ignored-strings",
    what: "an ignored array of millions of empty strings",
    build: (s) => ignored(`[${Array(fit(s, 3)).fill('""').join(",")}]`),
  },
  {
    id: "huge-ignored-containers",
    what: "an ignored array of millions of `[]` and `{}`",
    build: (s) => ignored(`[${Array(fit(s, 6)).fill("[],{}").join(",")}]`),
  },
  {
    id: "huge-ignored-literals",
    what: "an ignored array of millions of true/false/null",
    build: (s) => ignored(`[${Array(fit(s, 16)).fill("true,false,null").join(",")}]`),
  },
  {
    id: "huge-padding",
    what: "a small header padded with ~100 MB of spaces",
    build: (s) => valid(`{"t":${T}}${" ".repeat(fit(s, 1))}`),
  },
  {
    id: "huge-inner-whitespace",
    what: "~100 MB of whitespace between two tokens",
    build: (s) => valid(`{"t":${" \t\r\n".repeat(fit(s, 4))}${T}}`),
  },
  {
    id: "huge-nul-padding",
    what: "a small header padded with NUL bytes",
    build: (s) => valid(`{"t":${T}}${"\u0000".repeat(fit(s, 1))}`),
  },
];

/** The whole file for a case: u64 LE header length, header, zeroed data. */
export function buildHostileFile(hostile: HostileCase, size: number): Uint8Array {
  const { header, data } = hostile.build(size);
  const bytes = typeof header === "string" ? new TextEncoder().encode(header) : header;
  const file = new Uint8Array(8 + bytes.length + data);
  new DataView(file.buffer).setBigUint64(0, BigInt(bytes.length), true);
  file.set(bytes, 8);
  return file;
}
