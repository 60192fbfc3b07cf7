/**
 * The index of a sharded checkpoint (`model.safetensors.index.json`): `{"metadata": {...}, "weight_map": {tensor:
 * shard file}}`. Read strictly (duplicate keys are errors, integers exact) and written byte for byte as
 * huggingface_hub (`json.dump(index, f, indent=2)`) or transformers (`json.dumps(index, indent=2, sort_keys=True)` and
 * a newline) write it.
 */
import { quoteName, SafetensorError } from "../format/errors.js";
import { JsonCursor } from "../format/json.js";
import { compareCodePoints } from "../format/serialize.js";

/** The index file's name in a checkpoint directory. */
export const INDEX_FILE_NAME = "model.safetensors.index.json";

/** Largest index accepted by default: real ones are a few MB at most (a 405B model's is ~2 MB). */
export const DEFAULT_MAX_INDEX_BYTES = 64 << 20;

/** A JSON value from the index's `metadata`: objects are Maps (keys such as `__proto__` are data). */
export type JsonValue = string | number | bigint | boolean | null | JsonValue[] | Map<string, JsonValue>;

/** A parsed `model.safetensors.index.json`. */
export interface ShardIndex {
  /** The index's `metadata` object (empty when absent). */
  readonly metadata: ReadonlyMap<string, JsonValue>;
  /** `metadata.total_size` when it is a non-negative integer, else null. */
  readonly totalSize: number | bigint | null;
  /** Tensor → shard file, in the index's order. */
  readonly weightMap: ReadonlyMap<string, string>;
  /** The shard files, each once, in order of first appearance. */
  readonly files: readonly string[];
  /** Problems that do not stop loading (transformers ignores them too). */
  readonly warnings: readonly string[];
}

function invalidIndex(message: string): never {
  throw new SafetensorError("InvalidIndex", message);
}

function readValue(cursor: JsonCursor): JsonValue {
  const c = cursor.peek();
  if (c === 0x22) return cursor.string();
  if (c === 0x7b) {
    const out = new Map<string, JsonValue>();
    cursor.object((key) => {
      if (out.has(key)) cursor.fail(`duplicate key ${quoteName(key)}`);
      out.set(key, readValue(cursor));
    });
    return out;
  }
  if (c === 0x5b) {
    const out: JsonValue[] = [];
    cursor.array(() => out.push(readValue(cursor)));
    return out;
  }
  if (c === 0x74 || c === 0x66 || c === 0x6e) {
    const word = c === 0x74 ? "true" : c === 0x66 ? "false" : "null";
    cursor.literal(word);
    return word === "true" ? true : word === "false" ? false : null;
  }
  const number = cursor.number();
  if (number.kind === "float") return number.value;
  const value = number.negative ? -number.value : number.value;
  return typeof value === "bigint" && value >= -(2n ** 53n) && value <= 2n ** 53n ? Number(value) : value;
}

/** Parse and check an index's text. */
export function parseIndex(text: string): ShardIndex {
  const cursor = new JsonCursor(text);
  let root: JsonValue;
  try {
    root = readValue(cursor);
    cursor.end();
  } catch (error) {
    if (error instanceof SafetensorError) invalidIndex(error.message.replace("in header", "in index"));
    throw error;
  }
  if (!(root instanceof Map)) invalidIndex("the index must be a JSON object");
  const warnings: string[] = [];
  for (const key of root.keys()) {
    if (key !== "metadata" && key !== "weight_map") warnings.push(`index has an unknown key ${quoteName(key)}`);
  }
  const rawMetadata = root.get("metadata") ?? null;
  if (rawMetadata !== null && !(rawMetadata instanceof Map)) invalidIndex("`metadata` must be an object");
  const metadata = rawMetadata ?? new Map<string, JsonValue>();
  const rawTotal = metadata.get("total_size");
  let totalSize: number | bigint | null = null;
  if (rawTotal !== undefined) {
    if ((typeof rawTotal === "number" && Number.isInteger(rawTotal) && rawTotal >= 0) || typeof rawTotal === "bigint") {
      totalSize = rawTotal;
    } else warnings.push(`metadata.total_size is not a byte count (${describe(rawTotal)})`);
  }
  const rawMap = root.get("weight_map");
  if (!(rawMap instanceof Map)) invalidIndex("the index has no `weight_map` object");
  const weightMap = new Map<string, string>();
  const files: string[] = [];
  const known = new Set<string>();
  for (const [tensor, file] of rawMap) {
    if (typeof file !== "string") invalidIndex(`weight_map[${quoteName(tensor)}] must be a file name`);
    checkShardPath(file);
    weightMap.set(tensor, file);
    if (!known.has(file)) {
      known.add(file);
      files.push(file);
    }
  }
  return { metadata, totalSize, weightMap, files, warnings };
}

function describe(value: JsonValue): string {
  if (value instanceof Map) return "an object";
  if (Array.isArray(value)) return "an array";
  return JSON.stringify(typeof value === "bigint" ? String(value) : value);
}

/**
 * Refuse shard names that could leave the checkpoint's directory: absolute paths, drive letters, `..`, empty or `.`
 * segments, backslashes (path separators on Windows), NUL. Subdirectories are allowed. Symlinks are checked by the
 * Node opener, which can see the file system.
 */
export function checkShardPath(file: string): void {
  const unsafe = (why: string): never => {
    throw new SafetensorError("UnsafePath", `shard path ${quoteName(file)} ${why}`);
  };
  if (file === "") unsafe("is empty");
  if (file.includes("\0")) unsafe("contains NUL");
  if (file.includes("\\")) unsafe("contains a backslash");
  if (file.startsWith("/") || /^[A-Za-z]:/.test(file)) unsafe("is absolute");
  for (const segment of file.split("/")) {
    if (segment === "..") unsafe("leaves the checkpoint's directory");
    if (segment === "" || segment === ".") unsafe("has an empty or `.` segment");
  }
}

/** Python's `json.dumps` string form with `ensure_ascii=True`: everything outside space..tilde is escaped. */
function pyString(text: string): string {
  let out = '"';
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) out += '\\"';
    else if (c === 0x5c) out += "\\\\";
    else if (c >= 0x20 && c <= 0x7e) out += text[i];
    else if (c === 0x0a) out += "\\n";
    else if (c === 0x0d) out += "\\r";
    else if (c === 0x09) out += "\\t";
    else if (c === 0x08) out += "\\b";
    else if (c === 0x0c) out += "\\f";
    else out += `\\u${c.toString(16).padStart(4, "0")}`;
  }
  return `${out}"`;
}

function pyValue(value: JsonValue, indent: string, sortKeys: boolean): string {
  if (typeof value === "string") return pyString(value);
  if (typeof value === "bigint") return String(value);
  if (typeof value === "number") {
    if (!Number.isSafeInteger(value)) {
      throw new SafetensorError("InvalidMetadata", `index metadata number ${value} is not an exact integer`);
    }
    return String(value);
  }
  if (value === null || typeof value === "boolean") return String(value);
  const inner = `${indent}  `;
  if (Array.isArray(value)) {
    if (value.length === 0) return "[]";
    return `[\n${value.map((v) => inner + pyValue(v, inner, sortKeys)).join(",\n")}\n${indent}]`;
  }
  if (value.size === 0) return "{}";
  const entries = [...value];
  if (sortKeys) entries.sort((a, b) => compareCodePoints(a[0], b[0]));
  return `{\n${entries.map(([k, v]) => `${inner}${pyString(k)}: ${pyValue(v, inner, sortKeys)}`).join(",\n")}\n${indent}}`;
}

/** How the index text is written. */
export interface FormatIndexOptions {
  /**
   * "huggingface_hub" (default): keys in insertion order, no final newline, as `save_torch_state_dict` writes;
   * "transformers": keys sorted and a final newline, as `save_pretrained` writes.
   */
  indexStyle?: "huggingface_hub" | "transformers";
}

/**
 * The index text. `metadata` holds `total_size` (and anything else: huggingface_hub puts the user's metadata after
 * it); `weightMap` is written in its order (sorted in the transformers style).
 */
export function formatIndex(
  metadata: ReadonlyMap<string, JsonValue>,
  weightMap: ReadonlyMap<string, string>,
  options: FormatIndexOptions = {},
): string {
  const transformers = options.indexStyle === "transformers";
  const root = new Map<string, JsonValue>([
    ["metadata", new Map(metadata)],
    ["weight_map", new Map(weightMap)],
  ]);
  return pyValue(root, "", transformers) + (transformers ? "\n" : "");
}
