/**
 * Strict reading of a NumPy `.npy` array (format versions 1.0, 2.0 and 3.0) as the values of an edit: the header
 * dict must have exactly `descr`, `fortran_order` and `shape`; the data must be exactly shape × item size bytes.
 * Pure (no IO): works on the file's bytes.
 *
 * What an array may hold for a tensor of dtype D (anything else is refused, naming both):
 * - D's own numpy type (`<f2` for F16, `<f4` F32, `<f8` F64, `|b1` BOOL, `|u1` U8, `<i8` I64, `<c8` C64, ...):
 *   copied as it is;
 * - untyped items of D's width (`<V2` for BF16, `<V1` for F8: how ml_dtypes' bfloat16 / float8 arrays are saved):
 *   copied as they are;
 * - `<f4` (float32) or `<f8` (float64) for every float dtype but C64: encoded as numpy / ml_dtypes cast them,
 *   rounded to nearest even (codecs/numpy.ts; float32 into F64 exactly). numpy's default float type is float64:
 *   `np.save(path, values)` of an array numpy made is `<f8`.
 * Big-endian and Fortran-order arrays are refused (save them with `np.ascontiguousarray(a).astype("<...")`).
 *
 * And the header of an array to write (`npyHeader`, for `safetensors get --out x.npy`), in the types above.
 */
import { canEncode } from "../codecs/index.js";
import { type Dtype, dtypeOf } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";
import type { Dim } from "../slice/index.js";

const MAGIC = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]; // "\x93NUMPY"

/** numpy's descr of each dtype's own type (little-endian). */
const DESCR: Partial<Record<Dtype, string>> = {
  BOOL: "|b1",
  U8: "|u1",
  I8: "|i1",
  U16: "<u2",
  I16: "<i2",
  U32: "<u4",
  I32: "<i4",
  U64: "<u8",
  I64: "<i8",
  F16: "<f2",
  F32: "<f4",
  F64: "<f8",
  C64: "<c8",
};

export interface NpyArray {
  /** numpy's type string, e.g. `<f4`. */
  readonly descr: string;
  readonly shape: readonly number[];
  /** The array's bytes (a view of the input). */
  readonly data: Uint8Array;
}

/** Whether `bytes` start like a `.npy` file. */
export function isNpy(bytes: Uint8Array): boolean {
  return bytes.length >= 6 && MAGIC.every((b, i) => bytes[i] === b);
}

function bad(why: string): never {
  throw new SafetensorError("InvalidTensor", `not a valid .npy array: ${why}`);
}

/** Parse the header dict: `{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }` (any key order). */
function parseDict(text: string): { descr: string; fortran: boolean; shape: number[] } {
  let p = 0;
  const ws = () => {
    while (p < text.length && " \t\n".includes(text[p]!)) p++;
  };
  const expect = (c: string) => {
    ws();
    if (text[p] !== c) bad(`expected "${c}" at character ${p} of the header`);
    p++;
  };
  const string = (): string => {
    ws();
    const quote = text[p];
    if (quote !== "'" && quote !== '"') bad(`expected a string at character ${p} of the header`);
    const end = text.indexOf(quote, p + 1);
    if (end < 0) bad("unterminated string in the header");
    const value = text.slice(p + 1, end);
    if (value.includes("\\")) bad("escapes in header strings are not supported");
    p = end + 1;
    return value;
  };
  const values = new Map<string, string | boolean | number[]>();
  expect("{");
  for (;;) {
    ws();
    if (text[p] === "}") break;
    const key = string();
    if (values.has(key)) bad(`duplicate key ${key}`);
    expect(":");
    ws();
    if (key === "descr") {
      if (text[p] === "[") bad("structured dtypes are not supported");
      values.set(key, string());
    } else if (key === "fortran_order") {
      const word = /^(True|False)/.exec(text.slice(p));
      if (!word) bad("fortran_order must be True or False");
      values.set(key, word[1] === "True");
      p += word[1]!.length;
    } else if (key === "shape") {
      expect("(");
      const dims: number[] = [];
      for (;;) {
        ws();
        if (text[p] === ")") break;
        const digits = /^\d+/.exec(text.slice(p));
        if (!digits) bad("shape must be a tuple of non-negative integers");
        const dim = Number(digits[0]);
        if (!Number.isSafeInteger(dim)) bad(`shape dimension ${digits[0]} is too large`);
        dims.push(dim);
        p += digits[0].length;
        ws();
        if (text[p] === ",") p++;
        else if (text[p] !== ")") bad("shape must be a tuple of non-negative integers");
      }
      p++;
      values.set(key, dims);
    } else bad(`unexpected key ${JSON.stringify(key)} in the header`);
    ws();
    if (text[p] === ",") p++;
    else if (text[p] !== "}") bad(`expected "," or "}" at character ${p} of the header`);
  }
  p++;
  ws();
  if (p !== text.length) bad("bytes after the header dict");
  const descr = values.get("descr");
  const fortran = values.get("fortran_order");
  const shape = values.get("shape");
  if (typeof descr !== "string" || typeof fortran !== "boolean" || !Array.isArray(shape)) {
    bad("the header must have descr, fortran_order and shape");
  }
  return { descr, fortran, shape };
}

function itemSize(descr: string): number {
  const match = /^[<>|=]?[a-zA-Z](\d+)$/.exec(descr);
  if (!match) bad(`unsupported descr ${JSON.stringify(descr)}`);
  return Number(match[1]);
}

/** Parse a `.npy` file's bytes (strict; see the module comment). */
export function parseNpy(bytes: Uint8Array): NpyArray {
  if (!isNpy(bytes)) bad("it does not start with \\x93NUMPY");
  if (bytes.length < 10) bad("truncated before the header length");
  const major = bytes[6]!;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let headerLength: number;
  let start: number;
  if (major === 1) {
    headerLength = view.getUint16(8, true);
    start = 10;
  } else if (major === 2 || major === 3) {
    if (bytes.length < 12) bad("truncated before the header length");
    headerLength = view.getUint32(8, true);
    start = 12;
  } else bad(`unsupported format version ${major}.${bytes[7]}`);
  if (start + headerLength > bytes.length) bad("truncated inside the header");
  let text: string;
  try {
    text = new TextDecoder(major === 3 ? "utf-8" : "latin1", { fatal: true }).decode(
      bytes.subarray(start, start + headerLength),
    );
  } catch {
    bad("the header is not valid text");
  }
  const { descr, fortran, shape } = parseDict(text.replace(/\n$/, ""));
  if (fortran && shape.filter((d) => d > 1).length > 1) {
    bad("Fortran-order arrays are not supported: save np.ascontiguousarray(a)");
  }
  if (descr.startsWith(">") && itemSize(descr) > 1) bad(`big-endian arrays (${descr}) are not supported`);
  const elements = shape.reduce((a, b) => a * b, 1);
  const length = elements * itemSize(descr);
  const data = bytes.subarray(start + headerLength);
  if (data.length !== length) {
    bad(`shape (${shape.join(", ")}) of ${descr} is ${length} bytes, the file holds ${data.length} after its header`);
  }
  return { descr, shape, data };
}

/**
 * How an array's items become a slice of `dtype` and `shape`: "raw" (its bytes are the slice's), "f32" / "f64"
 * (float32 / float64 values to encode). Refuses (`InvalidTensor`) another shape or an item type that does not fit
 * (see module comment).
 */
export function npyFits(array: NpyArray, dtype: Dtype, shape: readonly Dim[]): "raw" | "f32" | "f64" {
  const same = array.shape.length === shape.length && array.shape.every((d, i) => BigInt(d) === BigInt(shape[i]!));
  if (!same) {
    throw new SafetensorError(
      "InvalidTensor",
      `the .npy array has shape (${array.shape.join(", ")}), the slice has shape (${shape.join(", ")})`,
    );
  }
  const normalized = array.descr.replace(/^[=|]/, (c) => (c === "=" ? "<" : "|"));
  const own = DESCR[dtype];
  const width = dtypeOf(dtype).bits / 8;
  if (own !== undefined && (normalized === own || normalized.slice(1) === own.slice(1))) return "raw";
  if (/^[<|]V\d+$/.test(normalized) && Number.isInteger(width) && itemSize(normalized) === width) return "raw";
  if (normalized === "<f4" && canEncode(dtype)) return "f32";
  if (normalized === "<f8" && canEncode(dtype)) return "f64";
  throw new SafetensorError(
    "InvalidTensor",
    `a .npy array of ${array.descr} does not fit a ${dtype} tensor (give ${own ?? `<V${width}`}` +
      `${canEncode(dtype) ? ", <f4 or <f8, which are rounded to nearest even" : ""})`,
  );
}

/**
 * The numpy type a tensor of `dtype` is written as: its own (`<f4`, `|u1`, `<c8`...), or for the dtypes numpy lacks
 * but whose items are whole bytes (BF16, the F8 kinds) untyped items of that width, `<V2` / `<V1`, as numpy saves
 * ml_dtypes' bfloat16 and float8 arrays (`np.load(p).view(ml_dtypes.bfloat16)` gives the values back). Undefined for
 * the sub-byte dtypes (F4, F6_*: several values a byte), which have no numpy layout.
 */
export function npyDescr(dtype: Dtype): string | undefined {
  const own = DESCR[dtype];
  if (own !== undefined) return own;
  const bits = dtypeOf(dtype).bits;
  return bits % 8 === 0 ? `<V${bits / 8}` : undefined;
}

/**
 * The bytes before an array's data in a `.npy` file, as `np.save` writes them: format 1.0 (2.0 when the header
 * needs over 65535 bytes), the dict padded with spaces to a multiple of 64 bytes and ended by a newline.
 */
export function npyHeader(descr: string, shape: readonly number[]): Uint8Array {
  const dims = shape.length === 1 ? `${shape[0]},` : shape.join(", ");
  const dict = `{'descr': '${descr}', 'fortran_order': False, 'shape': (${dims}), }`;
  const version = dict.length + 1 + 10 > 0xffff ? 2 : 1;
  const prefix = version === 1 ? 10 : 12;
  const total = Math.ceil((prefix + dict.length + 1) / 64) * 64;
  const header = new Uint8Array(total);
  header.set(MAGIC);
  header[6] = version;
  const view = new DataView(header.buffer);
  if (version === 1) view.setUint16(8, total - prefix, true);
  else view.setUint32(8, total - prefix, true);
  header.set(new TextEncoder().encode(dict.padEnd(total - prefix - 1, " ")), prefix);
  header[total - 1] = 0x0a;
  return header;
}
