/**
 * A tensor's elements as JavaScript values (`toArray`, `toNested`) and as text (`toString`, and what
 * `console.log(tensor)` prints): numbers for the float and 8-32-bit integer dtypes (F16, BF16, F8, F6 and F4 decoded),
 * bigints for I64 and U64, booleans for BOOL, `[re, im]` pairs for C64. Text follows numpy and torch: the dtype and
 * shape, then the values, with the middle of each axis left out ("...") when the tensor is large. Only the elements
 * shown are decoded, so printing a tensor of a billion elements costs microseconds. Pure: runs in browsers.
 */
import { toFloat32 } from "../codecs/index.js";
import { type Dtype, dtypeOf } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";

export type Element = number | bigint | boolean | [number, number];
export type Nested = Element | Nested[];

/** `toArray` and `toNested` refuse tensors of more elements than this unless given `maxElements`. */
export const DEFAULT_MAX_ARRAY_ELEMENTS = 1 << 20;
/** Tensors of more elements are printed summarized (numpy's `threshold`). */
export const PRINT_THRESHOLD = 1000;
/** Elements shown at each end of a summarized axis (numpy's `edgeitems`). */
export const PRINT_EDGE_ITEMS = 3;
/** Printed text wider than this goes on several lines, one per row. */
const LINE_WIDTH = 80;

interface Values {
  readonly dtype: Dtype;
  readonly shape: readonly number[];
  readonly data: Uint8Array;
}

const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b));

/** Elements `start` to `start + count` of a tensor's bytes, decoded. */
export function decodeElements(tensor: Values, start: number, count: number): Element[] {
  if (count <= 0) return [];
  const { dtype, data } = tensor;
  const info = dtypeOf(dtype);
  if (info.bits < 8) {
    // Packed: decode from the start of the group of bytes that holds whole elements (F4: 2 a byte, F6: 4 in 3).
    const group = 8 / gcd(info.bits, 8);
    const first = Math.floor(start / group) * group;
    const end = Math.min(start + count, tensorNumel(tensor));
    const bytes = data.subarray((first * info.bits) / 8, Math.ceil((end * info.bits) / 8));
    return [...toFloat32(dtype, bytes, { count: end - first }).subarray(start - first)];
  }
  const width = info.bits / 8;
  const bytes = data.slice(start * width, (start + count) * width);
  const view = new DataView(bytes.buffer);
  const out: Element[] = [];
  for (let i = 0; i < count; i++) {
    const at = i * width;
    switch (dtype) {
      case "BOOL":
        out.push(bytes[at] !== 0);
        break;
      case "U8":
        out.push(bytes[at]!);
        break;
      case "I8":
        out.push(view.getInt8(at));
        break;
      case "U16":
        out.push(view.getUint16(at, true));
        break;
      case "I16":
        out.push(view.getInt16(at, true));
        break;
      case "U32":
        out.push(view.getUint32(at, true));
        break;
      case "I32":
        out.push(view.getInt32(at, true));
        break;
      case "U64":
        out.push(view.getBigUint64(at, true));
        break;
      case "I64":
        out.push(view.getBigInt64(at, true));
        break;
      case "F32":
        out.push(view.getFloat32(at, true));
        break;
      case "F64":
        out.push(view.getFloat64(at, true));
        break;
      case "C64":
        out.push([view.getFloat32(at, true), view.getFloat32(at + 4, true)]);
        break;
      default:
        // F16, BF16, the F8 kinds: decoded exactly to float32.
        out.push(toFloat32(dtype, bytes.subarray(at, at + width), { count: 1 })[0]!);
    }
  }
  return out;
}

function tensorNumel(tensor: Values): number {
  return tensor.shape.reduce((a, b) => a * b, 1);
}

function checkSize(tensor: Values, maxElements: number | undefined): number {
  const numel = tensorNumel(tensor);
  const limit = maxElements ?? DEFAULT_MAX_ARRAY_ELEMENTS;
  if (numel > limit) {
    throw new SafetensorError(
      "TooLarge",
      `${tensor.dtype} [${tensor.shape.join(", ")}] has ${numel} elements, over the ${limit} a JavaScript array is ` +
        "made for (pass { maxElements } to allow more, or use typed() / toFloat32() / getSlice)",
    );
  }
  return numel;
}

/** Every element, flat in row-major order. */
export function toArray(tensor: Values, options: { maxElements?: number } = {}): Element[] {
  return decodeElements(tensor, 0, checkSize(tensor, options.maxElements));
}

/** The elements as arrays nested by the shape (a scalar is its value). */
export function toNested(tensor: Values, options: { maxElements?: number } = {}): Nested {
  const flat = toArray(tensor, options);
  const build = (axis: number, offset: number): Nested => {
    if (axis === tensor.shape.length) return flat[offset]!;
    const stride = tensor.shape.slice(axis + 1).reduce((a, b) => a * b, 1);
    return Array.from({ length: tensor.shape[axis]! }, (_, i) => build(axis + 1, offset + i * stride));
  };
  return build(0, 0);
}

function formatElement(value: Element): string {
  if (typeof value === "boolean" || typeof value === "bigint") return String(value);
  if (Array.isArray(value)) {
    const [re, im] = value.map(formatNumber) as [string, string];
    return `${re}${im.startsWith("-") ? "" : "+"}${im}j`;
  }
  return formatNumber(value);
}

/** Five significant digits, as short as they go: 1, 0.5, 0.012634, -3.1416e-7, nan, inf. */
function formatNumber(value: number): string {
  if (Number.isNaN(value)) return "nan";
  if (!Number.isFinite(value)) return value > 0 ? "inf" : "-inf";
  if (Object.is(value, -0)) return "-0";
  return String(Number(value.toPrecision(5)));
}

/** The values as numpy prints them: nested brackets, "..." for the middle of axes of a large tensor. */
export function formatValues(tensor: Values): string {
  const { shape } = tensor;
  const numel = tensorNumel(tensor);
  const summarize = numel > PRINT_THRESHOLD;
  const shown = (length: number): number[] =>
    summarize && length > 2 * PRINT_EDGE_ITEMS
      ? [
          ...Array.from({ length: PRINT_EDGE_ITEMS }, (_, i) => i),
          -1,
          ...Array.from({ length: PRINT_EDGE_ITEMS }, (_, i) => length - PRINT_EDGE_ITEMS + i),
        ]
      : Array.from({ length }, (_, i) => i);
  // Decode the innermost rows shown, each in one call (a run of at most the row's length or 2 x edge items).
  const row = shape.length === 0 ? 1 : shape[shape.length - 1]!;
  const cells = (offset: number): string[] =>
    shown(row).map((i) => (i < 0 ? "..." : formatElement(decodeElements(tensor, offset + i, 1)[0]!)));
  if (shape.length === 0) return cells(0)[0]!;
  const build = (axis: number, offset: number): string[] => {
    const stride = shape.slice(axis + 1).reduce((a, b) => a * b, 1);
    if (axis === shape.length - 1) return [`[${cells(offset).join(", ")}]`];
    const parts = shown(shape[axis]!).map((i) => (i < 0 ? ["..."] : build(axis + 1, offset + i * stride)));
    const flat = parts.map((lines) => lines.join(" "));
    const oneLine = `[${flat.join(", ")}]`;
    if (oneLine.length <= LINE_WIDTH && !oneLine.includes("\n")) return [oneLine];
    const lines: string[] = [];
    parts.forEach((sub, k) => {
      const last = k === parts.length - 1;
      sub.forEach((line, j) => {
        const lead = k === 0 && j === 0 ? "[" : " ";
        const tail = j === sub.length - 1 ? (last ? "]" : ",") : "";
        lines.push(`${lead}${line}${tail}`);
      });
    });
    return lines;
  };
  if (numel === 0) return `[]`;
  return build(0, 0).join("\n");
}

/** `Tensor(F32, [2, 3]) [[1, 2, 3], [4, 5, 6]]`: dtype, shape, values (several lines for a wide one). */
export function formatTensor(tensor: Values): string {
  const head = `Tensor(${tensor.dtype}, [${tensor.shape.join(", ")}])`;
  const values = formatValues(tensor);
  return values.includes("\n") ? `${head}\n${values}` : `${head} ${values}`;
}
