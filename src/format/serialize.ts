/**
 * Laying out a file for writing, byte-identical to the reference writer for the same input:
 * tensors ordered by dtype rank descending then name (UTF-8 byte order), compact JSON with `__metadata__` first,
 * fields in the order dtype, shape, data_offsets, header padded with spaces to a multiple of 8, no padding between
 * tensors. Differences on purpose: metadata keys are sorted (the reference emits them in hash order), and inputs the
 * reference would write into an unreadable file are refused.
 */
import { byteSize, type Dtype, dtypeInfo } from "./dtypes.js";
import { quoteName, SafetensorError } from "./errors.js";
import { DEFAULT_MAX_HEADER_BYTES } from "./header.js";

/** A tensor to lay out before its bytes exist: what the header says about it. */
export interface TensorSpec {
  readonly dtype: Dtype | string;
  readonly shape: readonly number[];
}

/** Anything with a dtype, a shape and raw little-endian bytes. */
export interface TensorLike extends TensorSpec {
  readonly data: ArrayBufferView;
}

/**
 * Tensors by name as given to writers: a record, a Map, or an iterable of `[name, tensor]` pairs (their order is
 * kept where the format leaves it free).
 */
export type NamedTensors<T extends TensorSpec = TensorLike> =
  | ReadonlyMap<string, T>
  | Iterable<readonly [string, T]>
  | Readonly<Record<string, T>>;

/** `__metadata__` as given to writers: a record or Map of strings, or nothing. */
export type MetadataInput = ReadonlyMap<string, string> | Readonly<Record<string, string>> | null | undefined;

/** Options of every writer. */
export interface SerializeOptions {
  /** Refuse headers larger than this (the reference refuses what it could not read back). */
  maxHeaderBytes?: number;
}

/**
 * The third argument of `serialize` and `saveFile`: the metadata, as before, or an options object holding it
 * (`{ metadata, ...options }`). An object is options when it has `metadata` that is not a string, or when all its
 * keys are option names (`optionKeys`) and one of its values is not a string: `{ metadata: { a: "1" }, fsync: true }`
 * and `{ fsync: true }` are options, `{ format: "pt" }` is metadata, and `{ k: 1 }` stays metadata (refused as
 * `InvalidMetadata`, never dropped).
 */
export function splitMetadataArgument<O extends object>(
  third: MetadataInput | (O & { metadata?: MetadataInput }),
  fourth: O | undefined,
  optionKeys: readonly string[],
): { metadata: MetadataInput; options: O | undefined } {
  if (third === null || third === undefined || third instanceof Map) return { metadata: third, options: fourth };
  const entries = Object.entries(third);
  const isOptions =
    (Object.hasOwn(third, "metadata") && typeof (third as { metadata?: unknown }).metadata !== "string") ||
    (entries.length > 0 &&
      entries.every(([key]) => key === "metadata" || optionKeys.includes(key)) &&
      entries.some(([, value]) => typeof value !== "string"));
  if (!isOptions) return { metadata: third as MetadataInput, options: fourth };
  const { metadata, ...options } = third as O & { metadata?: MetadataInput };
  return { metadata, options: { ...options, ...fourth } as O };
}

/** The options `serialize` takes, by name. */
export const SERIALIZE_OPTION_KEYS: readonly (keyof SerializeOptions)[] = ["maxHeaderBytes"];

/** Compare strings by Unicode code point, which is UTF-8 byte order (Rust's `str` order, Python's `sorted`). */
export function compareCodePoints(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x === y) continue;
    // UTF-16 puts surrogates (astral code points) below U+E000..U+FFFF; code point order puts them above.
    if (x >= 0xd800 && y >= 0xd800) {
      x = x <= 0xdfff ? x + 0x2000 : x - 0x800;
      y = y <= 0xdfff ? y + 0x2000 : y - 0x800;
    }
    return x - y;
  }
  return a.length - b.length;
}

function entriesOf<T>(input: ReadonlyMap<string, T> | Iterable<readonly [string, T]> | Readonly<Record<string, T>>) {
  if (input instanceof Map) return [...input.entries()] as [string, T][];
  if (typeof (input as Iterable<unknown>)[Symbol.iterator] === "function") {
    return [...(input as Iterable<readonly [string, T]>)].map(([k, v]) => [k, v] as [string, T]);
  }
  return Object.entries(input as Record<string, T>);
}

/**
 * In a `u` regex, `\p{Cs}` only matches surrogates that are not part of a pair. Made on first use, from a string: V8
 * builds a Unicode property's character set (ICU) when it creates such a regex and when it parses such a literal,
 * even one in a function never called, and this one was made with the module: callgrind, `--predictable`, Node 24,
 * 2026-12-03, `node -e 'new RegExp("\\p{Cs}", "u")'` costs 1.4 M instructions over `node -e 0` (93.9 M), and a
 * literal `/\p{Cs}/u` in an uncalled function 1.6 M. Importing the core (dist/lib/index.js): 121.2 -> 119.9 M on Node
 * 24, 134.8 -> 133.4 M on Node 20.
 */
let loneSurrogate: RegExp | undefined;

function hasLoneSurrogate(text: string): boolean {
  // biome-ignore lint/complexity/useRegexLiterals: a literal costs its ICU set when the module is parsed (above).
  loneSurrogate ??= new RegExp("\\p{Cs}", "u");
  return loneSurrogate.test(text);
}

function asBytes(view: ArrayBufferView): Uint8Array {
  return view instanceof Uint8Array ? view : new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

/** One tensor's place in a `LayoutPlan`. */
export interface LayoutTensor {
  readonly name: string;
  readonly dtype: Dtype;
  readonly shape: readonly number[];
  /** Offsets of the tensor's bytes in the data region (after the header): [begin, end). */
  readonly begin: number;
  readonly end: number;
}

/** A file's layout before any tensor byte is written: the header bytes and each tensor's offsets. */
export interface LayoutPlan<T extends LayoutTensor = LayoutTensor> {
  /** The 8-byte size prefix followed by the padded JSON header. */
  readonly header: Uint8Array;
  /** Tensors in the order their bytes follow the header. */
  readonly tensors: readonly T[];
  readonly dataLength: number;
  readonly totalLength: number;
}

/** A layout whose tensors carry their bytes. */
export interface PlannedTensor extends LayoutTensor {
  readonly data: Uint8Array;
}

/** A layout whose tensors carry their bytes: what `serialize` and `saveFile` write. */
export type SerializationPlan = LayoutPlan<PlannedTensor>;

/**
 * Validate names, dtypes, shapes and metadata and compute the header bytes and the data layout, without the tensors'
 * bytes: a file written to this plan is byte-identical to `serialize` of the same tensors. Streaming writers start
 * here, since the header depends on every tensor's size.
 */
export function planLayout(
  input: NamedTensors<TensorSpec>,
  metadataInput?: MetadataInput,
  options: SerializeOptions = {},
): LayoutPlan {
  return layout(input, metadataInput, options, () => undefined);
}

/** Validate the input and compute the header bytes and the data layout. */
export function planSerialization(
  input: NamedTensors,
  metadataInput?: MetadataInput,
  options: SerializeOptions = {},
): SerializationPlan {
  return layout(input, metadataInput, options, (name, tensor, dtype, size) => {
    if (!ArrayBuffer.isView(tensor.data)) {
      throw new SafetensorError("InvalidTensor", `tensor ${quoteName(name)}: data must be a TypedArray or DataView`, {
        tensor: name,
      });
    }
    const data = asBytes(tensor.data);
    if (BigInt(data.byteLength) !== size) {
      throw new SafetensorError(
        "InvalidTensor",
        `tensor ${quoteName(name)}: ${dtype} [${tensor.shape.join(", ")}] needs ${size} bytes, data has ${data.byteLength}`,
        { tensor: name },
      );
    }
    return data;
  }) as SerializationPlan;
}

/**
 * The one layout routine behind `planLayout` and `planSerialization`: `check` validates each tensor (in input
 * order, right after its shape) and returns its bytes, if the plan carries them.
 */
function layout<T extends TensorSpec>(
  input: NamedTensors<T>,
  metadataInput: MetadataInput,
  options: SerializeOptions,
  check: (name: string, tensor: T, dtype: Dtype, size: bigint) => Uint8Array | undefined,
): LayoutPlan<LayoutTensor & { data?: Uint8Array }> {
  const seen = new Set<string>();
  const items: { name: string; dtype: Dtype; rank: number; shape: number[]; size: number; data?: Uint8Array }[] = [];
  for (const [name, tensor] of entriesOf(input)) {
    if (typeof name !== "string") throw new SafetensorError("InvalidTensor", "tensor names must be strings");
    if (name === "__metadata__") {
      throw new SafetensorError("InvalidTensor", "a tensor cannot be named `__metadata__` (reserved for metadata)", {
        tensor: name,
      });
    }
    if (hasLoneSurrogate(name)) {
      throw new SafetensorError("InvalidTensor", `tensor name ${quoteName(name)} is not valid Unicode`, {
        tensor: name,
      });
    }
    if (seen.has(name)) throw new SafetensorError("DuplicateKey", `duplicate tensor name ${quoteName(name)}`);
    seen.add(name);
    const info = dtypeInfo(String(tensor?.dtype));
    if (!info) {
      throw new SafetensorError(
        "UnknownDtype",
        `tensor ${quoteName(name)}: unknown dtype ${quoteName(String(tensor?.dtype))}`,
        {
          tensor: name,
        },
      );
    }
    const shape = [...(tensor.shape ?? [])];
    for (const dim of shape) {
      if (!Number.isSafeInteger(dim) || dim < 0) {
        throw new SafetensorError(
          "InvalidTensor",
          `tensor ${quoteName(name)}: shape [${shape.join(", ")}] must hold non-negative integers`,
          {
            tensor: name,
          },
        );
      }
    }
    const size = byteSize(info.name, shape);
    if (size === null) {
      throw new SafetensorError(
        "MisalignedSlice",
        `tensor ${quoteName(name)}: ${info.name} [${shape.join(", ")}] does not fill whole bytes`,
        { tensor: name },
      );
    }
    if (size > BigInt(Number.MAX_SAFE_INTEGER)) {
      throw new SafetensorError("TooLarge", `tensor ${quoteName(name)}: ${size} bytes is more than a file can hold`, {
        tensor: name,
      });
    }
    const data = check(name, tensor, info.name, size);
    items.push({ name, dtype: info.name, rank: info.rank, shape, size: Number(size), data });
  }
  let metadata: [string, string][] | null = null;
  if (metadataInput !== null && metadataInput !== undefined) {
    metadata = entriesOf(metadataInput as ReadonlyMap<string, string>);
    const keys = new Set<string>();
    for (const [key, value] of metadata) {
      if (typeof key !== "string" || typeof value !== "string") {
        throw new SafetensorError(
          "InvalidMetadata",
          `metadata must map strings to strings (key ${quoteName(String(key))})`,
        );
      }
      if (hasLoneSurrogate(key) || hasLoneSurrogate(value)) {
        throw new SafetensorError("InvalidMetadata", `metadata entry ${quoteName(key)} is not valid Unicode`);
      }
      if (keys.has(key)) throw new SafetensorError("DuplicateKey", `duplicate metadata key ${quoteName(key)}`);
      keys.add(key);
    }
    if (metadata.length === 0 && items.length === 0) {
      // The reference writes `{},"__metadata__":{}}` here, which nothing can read back.
      throw new SafetensorError(
        "InvalidMetadata",
        "empty metadata with no tensors cannot be written (refused: the reference writes an unreadable file)",
      );
    }
    metadata.sort((a, b) => compareCodePoints(a[0], b[0]));
  }

  items.sort((a, b) => b.rank - a.rank || compareCodePoints(a.name, b.name));

  const parts: string[] = [];
  if (metadata) {
    parts.push(`"__metadata__":{${metadata.map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`).join(",")}}`);
  }
  const tensors: (LayoutTensor & { data?: Uint8Array })[] = [];
  let offset = 0;
  for (const item of items) {
    const begin = offset;
    offset += item.size;
    parts.push(
      `${JSON.stringify(item.name)}:{"dtype":"${item.dtype}","shape":[${item.shape.join(",")}],"data_offsets":[${begin},${offset}]}`,
    );
    const tensor = { name: item.name, dtype: item.dtype, shape: item.shape, begin, end: offset };
    tensors.push(item.data === undefined ? tensor : { ...tensor, data: item.data });
  }
  const json = new TextEncoder().encode(`{${parts.join(",")}}`);
  const padded = json.length + ((8 - (json.length % 8)) % 8);
  const maxHeaderBytes = options.maxHeaderBytes ?? DEFAULT_MAX_HEADER_BYTES;
  if (padded > maxHeaderBytes) {
    throw new SafetensorError("HeaderTooLarge", `header would be ${padded} bytes, over the limit of ${maxHeaderBytes}`);
  }
  const header = new Uint8Array(8 + padded).fill(0x20, 8 + json.length);
  new DataView(header.buffer).setBigUint64(0, BigInt(padded), true);
  header.set(json, 8);
  return { header, tensors, dataLength: offset, totalLength: header.length + offset };
}

/** Serialize tensors (and optional string metadata) into one safetensors buffer. */
export function serialize(
  input: NamedTensors,
  metadataOrOptions?: MetadataInput | (SerializeOptions & { metadata?: MetadataInput }),
  options?: SerializeOptions,
): Uint8Array {
  const { metadata, options: chosen } = splitMetadataArgument(metadataOrOptions, options, SERIALIZE_OPTION_KEYS);
  const plan = planSerialization(input, metadata, chosen);
  const out = new Uint8Array(plan.totalLength);
  out.set(plan.header, 0);
  let at = plan.header.length;
  for (const tensor of plan.tensors) {
    out.set(tensor.data, at);
    at += tensor.data.byteLength;
  }
  return out;
}
