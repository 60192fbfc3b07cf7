/**
 * Planning a conversion: policy first (dangerous globals are always refused, unknown ones unless allowed, and then
 * whatever they built is dropped, never interpreted), then which dict holds the weights, then the tensors to write:
 * tied weights (same storage and geometry) once with the other names recorded in metadata the way the reference's
 * `save_model` / `convert.py` do, or each written in full with `cloneShared`.
 */
import type { Dtype } from "../format/dtypes.js";
import { quoteName, SafetensorError } from "../format/errors.js";
import { compareCodePoints } from "../format/serialize.js";
import type { Container, ContainerOptions } from "./container.js";
import { type ScanReport, scanContainer } from "./scan.js";
import { Interpreter, type InterpretOptions, type Item, type TensorRef } from "./torch.js";
import { describe, type PyValue } from "./values.js";

/** Options of a conversion: where the weights are, and what to do with unknown globals and tied tensors. */
export interface ConvertOptions extends ContainerOptions, InterpretOptions {
  /** The entry holding the weights (`state_dict`, `model`, a dotted path); found automatically when absent. */
  key?: string;
  /** Convert although the file names globals that are not allowlisted: what they build is dropped and listed. */
  allowUnknown?: boolean;
  /** Write every name of a tied tensor in full instead of once plus an alias in the metadata. */
  cloneShared?: boolean;
}

/** One tensor a conversion will write. */
export interface PlannedTensor {
  readonly name: string;
  readonly dtype: Dtype;
  readonly shape: readonly number[];
  readonly byteLength: number;
  readonly tensor: TensorRef;
}

/**
 * What a conversion will write (`planConversion`, `planPickleFile`): the tensors, where they came from, and what was
 * left out.
 */
export interface ConversionPlan {
  readonly scan: ScanReport;
  /** The entry the weights came from, as a path of keys ([] for the top level). */
  readonly key: readonly string[];
  readonly keyFound: "top-level" | "given" | "automatic";
  readonly tensors: readonly PlannedTensor[];
  /** Tied names not written: name → the name whose bytes it shares. */
  readonly aliases: ReadonlyMap<string, string>;
  /** Metadata for the output: `format: pt` (as the reference's converter writes) and the aliases. */
  readonly metadata: ReadonlyMap<string, string>;
  /** Entries of the selected dict that are not tensors, with their Python type. */
  readonly nonTensors: readonly { name: string; type: string }[];
  /** Entries built from non-allowlisted globals (only with allowUnknown): never built, not written. */
  readonly dropped: readonly { name: string; globals: readonly string[] }[];
  /** Top-level entries left out because the weights were found under another key. */
  readonly otherEntries: readonly string[];
}

const WEIGHT_KEYS = ["state_dict", "model_state_dict", "model", "module", "net", "network", "ema", "params", "weights"];

function keyName(key: unknown): string | null {
  if (typeof key === "string") return key;
  if (typeof key === "number" || typeof key === "bigint") return String(key);
  return null;
}

/** A tensor, or one that cannot be stored (it still marks where the weights are, to be refused precisely). */
function isTensorLike(item: Item): boolean {
  return item.kind === "tensor" || item.kind === "unsupported";
}

/** Items of a container: a dict's entries or a sequence's items with their index as key. */
function members(item: Item): readonly (readonly [unknown, Item])[] {
  if (item.kind === "dict") return item.entries;
  if (item.kind === "sequence") return item.items.map((v, i) => [i, v] as const);
  return [];
}

const holdsTensors = new WeakMap<Item, boolean>();

/** Does the item hold a tensor anywhere (dicts, tuples and lists, at any depth)? Cached: walks ask it per level. */
function hasTensors(item: Item): boolean {
  if (isTensorLike(item)) return true;
  if (item.kind !== "dict" && item.kind !== "sequence") return false;
  let known = holdsTensors.get(item);
  if (known === undefined) {
    // Set first: a cyclic structure (a list holding itself) is cut by the interpreter's placeholder anyway.
    holdsTensors.set(item, false);
    known = members(item).some(([, v]) => hasTensors(v));
    holdsTensors.set(item, known);
  }
  return known;
}

function child(item: Item, key: string): Item | undefined {
  if (item.kind !== "dict") return undefined;
  for (const [k, v] of item.entries) if (keyName(k) === key) return v;
  return undefined;
}

function refuse(scan: ScanReport, allowUnknown: boolean): void {
  const named = (verdict: string) => [
    ...new Set(
      scan.globals.filter((g) => g.verdict === verdict).map((g) => `${g.global} (${g.uses.join(", ")} in ${g.pickle})`),
    ),
  ];
  const dangerous = named("dangerous");
  if (dangerous.length) {
    throw new SafetensorError("UnsafePickle", `refused: the file names dangerous globals: ${dangerous.join("; ")}`);
  }
  if (allowUnknown) return;
  const unknown = named("unknown");
  if (unknown.length) {
    throw new SafetensorError(
      "UnsafePickle",
      `refused: the file names globals that are not allowlisted: ${unknown.join("; ")} (--allow-unknown converts the rest and drops what they build)`,
    );
  }
  if (scan.errors.length) {
    const e = scan.errors[0]!;
    throw new SafetensorError(
      "UnsafePickle",
      `refused: ${e.where} could not be read completely (error[${e.code}]: ${e.message})`,
    );
  }
}

/** Find the dict of weights: the given key, the top level when it holds tensors, else a known key or the only one. */
function select(root: Item, key: string | undefined): { path: string[]; item: Item; how: ConversionPlan["keyFound"] } {
  if (key !== undefined) {
    const exact = child(root, key);
    if (exact) return { path: [key], item: exact, how: "given" };
    let item: Item | undefined = root;
    const path = key.split(".");
    for (const part of path) item = item && child(item, part);
    if (!item) {
      const keys =
        root.kind === "dict" ? root.entries.map(([k]) => keyName(k) ?? describe(k)).join(", ") : describe(null);
      throw new SafetensorError(
        "InvalidCheckpoint",
        `no entry ${quoteName(key)} in the checkpoint (top-level keys: ${keys})`,
      );
    }
    return { path, item, how: "given" };
  }
  if (root.kind === "tensor")
    throw new SafetensorError("InvalidCheckpoint", "the checkpoint is a single tensor, not a dict of tensors");
  if (root.kind === "dict" && root.entries.some(([, v]) => isTensorLike(v)))
    return { path: [], item: root, how: "top-level" };
  let item: Item = root;
  const path: string[] = [];
  for (let depth = 0; depth < 3 && item.kind === "dict"; depth++) {
    const dict: Item = item;
    let next: readonly [string, Item] | undefined;
    for (const k of WEIGHT_KEYS) {
      const v = child(dict, k);
      if (v?.kind === "dict" && hasTensors(v)) {
        next = [k, v];
        break;
      }
    }
    if (!next && dict.kind === "dict") {
      const candidates: (readonly [PyValue, Item])[] = dict.entries.filter(
        ([k, v]) => keyName(k) !== null && hasTensors(v),
      );
      const only: readonly [PyValue, Item] | undefined = candidates.length === 1 ? candidates[0]! : undefined;
      if (only && only[1].kind === "dict") next = [keyName(only[0])!, only[1]];
    }
    if (!next) break;
    path.push(next[0]);
    item = next[1];
    if (item.kind === "dict" && item.entries.some(([, v]) => isTensorLike(v))) return { path, item, how: "automatic" };
  }
  // No dict holds tensors directly: the dict reached, or the top level, with the tensors nested in it (numpy arrays
  // in tuples, optimizer state keyed by parameter index).
  if (path.length && hasTensors(item)) return { path, item, how: "automatic" };
  if (root.kind === "dict" && hasTensors(root)) return { path: [], item: root, how: "top-level" };
  if (root.kind === "blocked") {
    throw new SafetensorError(
      "UnsafePickle",
      `the checkpoint is an object built from ${root.globals.join(", ")} (a whole pickled module?), not a dict of tensors`,
    );
  }
  const keys = root.kind === "dict" ? root.entries.map(([k]) => keyName(k) ?? describe(k)).join(", ") : root.kind;
  throw new SafetensorError("InvalidCheckpoint", `no dict of tensors found (top level: ${keys}); name one with --key`);
}

function sameGeometry(a: TensorRef, b: TensorRef): boolean {
  if (a === b) return true;
  if (a.source.kind !== "storage" || b.source.kind !== "storage") return false;
  return (
    a.source.key === b.source.key &&
    a.source.byteOffset === b.source.byteOffset &&
    a.dtype === b.dtype &&
    a.offset === b.offset &&
    a.shape.length === b.shape.length &&
    a.shape.every((d, i) => d === b.shape[i] && a.stride[i] === b.stride[i])
  );
}

/**
 * Plan the conversion of an opened checkpoint: refuses dangerous globals (and unknown ones without
 * `allowUnknown`) with `UnsafePickle`, then interprets the pickle as data and lists the tensors to write.
 */
export function planConversion(container: Container, options: ConvertOptions = {}): ConversionPlan {
  const scan = scanContainer(container);
  refuse(scan, options.allowUnknown === true);
  const root = new Interpreter(container, options).interpret(container.main.value);
  const { path, item, how } = select(root, options.key);
  if (item.kind !== "dict" && item.kind !== "sequence")
    throw new SafetensorError(
      "InvalidCheckpoint",
      `entry ${quoteName(path.join("."))} is a ${item.kind}, not a dict, tuple or list`,
    );

  const found: { name: string; tensor: TensorRef }[] = [];
  const nonTensors: { name: string; type: string }[] = [];
  const dropped: { name: string; globals: readonly string[] }[] = [];
  const unsupported: string[] = [];
  const names = new Set<string>();
  // Containers holding tensors are flattened with dotted names (dict keys, sequence indexes: `w.0`, `state.3.exp_avg`),
  // as the nested state dicts of Lightning and optimizers are named; their other leaves are reported by that name.
  const walk = (container: Item, prefix: string): void => {
    for (const [k, v] of members(container)) {
      const key = keyName(k);
      if (key === null) {
        nonTensors.push({ name: `${prefix}<${describe(k as PyValue)} key>`, type: v.kind });
        continue;
      }
      const name = prefix + key;
      if (v.kind === "tensor") {
        if (names.has(name))
          throw new SafetensorError("DuplicateKey", `tensor name ${quoteName(name)} appears twice after flattening`);
        names.add(name);
        found.push({ name, tensor: v.tensor });
      } else if ((v.kind === "dict" || v.kind === "sequence") && hasTensors(v)) walk(v, `${name}.`);
      else if (v.kind === "blocked") dropped.push({ name, globals: v.globals });
      else if (v.kind === "unsupported") unsupported.push(`${quoteName(name)}: ${v.reason}`);
      else
        nonTensors.push({
          name,
          type: v.kind === "other" || v.kind === "dict" || v.kind === "sequence" ? v.type : "object",
        });
    }
  };
  walk(item, "");
  if (unsupported.length) {
    throw new SafetensorError(
      "UnsupportedPickle",
      `cannot convert ${unsupported.length} tensor(s): ${unsupported.slice(0, 8).join("; ")}${unsupported.length > 8 ? "; …" : ""}`,
    );
  }
  if (found.length === 0) throw new SafetensorError("InvalidCheckpoint", "the selected entry holds no tensors");

  // Tied weights: keep the first name in code-point order of each group with the same storage and geometry.
  const aliases = new Map<string, string>();
  const tensors: PlannedTensor[] = [];
  const sorted = [...found].sort((a, b) => compareCodePoints(a.name, b.name));
  const kept: { name: string; tensor: TensorRef }[] = [];
  for (const entry of sorted) {
    const twin = options.cloneShared ? undefined : kept.find((k) => sameGeometry(k.tensor, entry.tensor));
    if (twin) {
      aliases.set(entry.name, twin.name);
      continue;
    }
    kept.push(entry);
  }
  for (const entry of found) {
    if (aliases.has(entry.name)) continue;
    const t = entry.tensor;
    const numel = t.shape.reduce((a, b) => a * b, 1);
    tensors.push({ name: entry.name, dtype: t.dtype, shape: t.shape, byteLength: numel * t.elementSize, tensor: t });
  }
  const metadata = new Map<string, string>([["format", "pt"]]);
  // As the reference converter: an alias never overrides an existing key.
  for (const [removed, keptName] of aliases) if (!metadata.has(removed)) metadata.set(removed, keptName);
  const otherEntries =
    path.length && root.kind === "dict"
      ? root.entries.map(([k]) => keyName(k) ?? describe(k)).filter((k) => k !== path[0])
      : [];
  return { scan, key: path, keyFound: how, tensors, aliases, metadata, nonTensors, dropped, otherEntries };
}
