/**
 * Interpreting a checkpoint's symbolic pickle: tensor rebuild calls become tensor references (dtype, geometry and
 * where the storage bytes are), numpy arrays become inline tensors, dicts stay dicts. Only allowlisted callables are
 * interpreted, by code written here; anything else stays an inert, "blocked" item.
 */
import type { Dtype } from "../format/dtypes.js";
import { quoteName, SafetensorError } from "../format/errors.js";
import { type Container, checkpointError, storageElementSize } from "./container.js";
import { canonicalGlobal, STORAGE_DTYPES } from "./globals.js";
import {
  asInt,
  describe,
  itemsOf,
  latin1Bytes,
  PyBytes,
  PyCall,
  PyDict,
  PyGlobal,
  PyList,
  PyPersistent,
  PySet,
  PyTuple,
  type PyValue,
} from "./values.js";

/** torch dtype name → safetensors dtype; the ones absent have no safetensors equivalent. */
const TORCH_TO_SAFETENSORS: ReadonlyMap<string, Dtype> = new Map<string, Dtype>([
  ["bool", "BOOL"],
  ["uint8", "U8"],
  ["int8", "I8"],
  ["int16", "I16"],
  ["uint16", "U16"],
  ["int32", "I32"],
  ["uint32", "U32"],
  ["int64", "I64"],
  ["uint64", "U64"],
  ["float16", "F16"],
  ["bfloat16", "BF16"],
  ["float32", "F32"],
  ["float64", "F64"],
  ["complex64", "C64"],
  ["float8_e4m3fn", "F8_E4M3"],
  ["float8_e5m2", "F8_E5M2"],
  ["float8_e4m3fnuz", "F8_E4M3FNUZ"],
  ["float8_e5m2fnuz", "F8_E5M2FNUZ"],
  ["float8_e8m0fnu", "F8_E8M0"],
]);

const TORCH_ELEMENT_SIZE: ReadonlyMap<string, number> = new Map([
  ["bool", 1],
  ["uint8", 1],
  ["int8", 1],
  ["int16", 2],
  ["uint16", 2],
  ["int32", 4],
  ["uint32", 4],
  ["int64", 8],
  ["uint64", 8],
  ["float16", 2],
  ["bfloat16", 2],
  ["float32", 4],
  ["float64", 8],
  ["complex32", 4],
  ["complex64", 8],
  ["complex128", 16],
  ["float8_e4m3fn", 1],
  ["float8_e5m2", 1],
  ["float8_e4m3fnuz", 1],
  ["float8_e5m2fnuz", 1],
  ["float8_e8m0fnu", 1],
  ["float4_e2m1fn_x2", 1],
  ["qint8", 1],
  ["quint8", 1],
  ["qint32", 4],
  ["quint4x2", 1],
  ["quint2x4", 1],
  ["bits8", 1],
  ["bits16", 2],
  ["bits1x8", 1],
  ["bits2x4", 1],
  ["bits4x2", 1],
]);

/** numpy dtype descr (kind + item size) → safetensors dtype. */
const NUMPY_TO_SAFETENSORS: ReadonlyMap<string, Dtype> = new Map<string, Dtype>([
  ["b1", "BOOL"],
  ["u1", "U8"],
  ["i1", "I8"],
  ["i2", "I16"],
  ["u2", "U16"],
  ["f2", "F16"],
  ["i4", "I32"],
  ["u4", "U32"],
  ["f4", "F32"],
  ["c8", "C64"],
  ["f8", "F64"],
  ["i8", "I64"],
  ["u8", "U64"],
]);

/** torch's rebuild functions of tensors safetensors cannot hold, with what to tell the user. */
const UNSUPPORTED_REBUILDS: ReadonlyMap<string, string> = new Map([
  ["torch._utils._rebuild_qtensor", "a quantized tensor (safetensors has no quantized dtypes)"],
  ["torch._utils._rebuild_sparse_tensor", "a sparse tensor"],
  ["torch._utils._rebuild_nested_tensor", "a nested tensor"],
  ["torch._utils._rebuild_meta_tensor_no_storage", "a meta tensor (it has no data)"],
  ["torch._utils._rebuild_wrapper_subclass", "a wrapper-subclass tensor"],
  ["torch._utils._rebuild_device_tensor_from_numpy", "a device tensor rebuilt from numpy"],
]);

export type TensorSource =
  | { readonly kind: "storage"; readonly key: string; readonly byteOffset: number }
  | { readonly kind: "inline"; readonly bytes: Uint8Array };

export interface TensorRef {
  readonly dtype: Dtype;
  /** The dtype as the file names it: "float32", or a numpy descr such as ">f8". */
  readonly sourceDtype: string;
  readonly elementSize: number;
  readonly shape: readonly number[];
  /** In elements. */
  readonly stride: readonly number[];
  /** In elements, from `source`. */
  readonly offset: number;
  readonly source: TensorSource;
  /** The stored bytes are big-endian and must be swapped per element. */
  readonly swap: boolean;
  readonly origin: "tensor" | "parameter" | "ndarray";
}

export type Item =
  | { readonly kind: "tensor"; readonly tensor: TensorRef }
  | { readonly kind: "dict"; readonly type: string; readonly entries: readonly (readonly [PyValue, Item])[] }
  | { readonly kind: "sequence"; readonly type: string; readonly items: readonly Item[] }
  /** A tensor that exists but cannot be stored in safetensors (quantized, complex128, sparse, …). */
  | { readonly kind: "unsupported"; readonly reason: string }
  /** Built from globals that are not allowlisted: never interpreted. */
  | { readonly kind: "blocked"; readonly globals: readonly string[] }
  | { readonly kind: "other"; readonly type: string };

export interface InterpretOptions {
  /** Deepest nesting of containers interpreted. Default 200 (state dicts nest 1–3 deep). */
  maxNesting?: number;
}

function qualified(g: PyGlobal): string {
  const c = canonicalGlobal(g.module, g.name);
  return `${c.module}.${c.name}`;
}

/** Non-allowlisted globals a value is built from (deep, cycle-safe, bounded). */
export function blockedGlobals(
  value: PyValue,
  found = new Set<string>(),
  seen = new Set<object>(),
  depth = 0,
): Set<string> {
  if (value === null || typeof value !== "object" || seen.has(value) || depth > 400) return found;
  seen.add(value);
  if (value instanceof PyGlobal) {
    if (!value.allowed) found.add(`${value.module}.${value.name}`);
  } else if (value instanceof PyCall) {
    blockedGlobals(value.callee, found, seen, depth + 1);
    blockedGlobals(value.args, found, seen, depth + 1);
    blockedGlobals(value.kwargs, found, seen, depth + 1);
    if (value.state !== undefined) blockedGlobals(value.state, found, seen, depth + 1);
    for (const v of value.appended) blockedGlobals(v, found, seen, depth + 1);
    for (const [k, v] of value.setItems) {
      blockedGlobals(k, found, seen, depth + 1);
      blockedGlobals(v, found, seen, depth + 1);
    }
  } else if (value instanceof PyTuple || value instanceof PyList || value instanceof PySet) {
    for (const v of value.items) blockedGlobals(v, found, seen, depth + 1);
  } else if (value instanceof PyDict) {
    for (const [k, v] of value.entries) {
      blockedGlobals(k, found, seen, depth + 1);
      blockedGlobals(v, found, seen, depth + 1);
    }
    if (value.state !== undefined) blockedGlobals(value.state, found, seen, depth + 1);
  } else if (value instanceof PyPersistent) {
    blockedGlobals(value.pid, found, seen, depth + 1);
  }
  return found;
}

function dims(value: PyValue | undefined, what: string): number[] {
  const items = itemsOf(value);
  if (!items) throw checkpointError(`tensor ${what} is a ${describe(value)}, not a tuple`);
  return items.map((v) => {
    const n = asInt(v);
    if (n === null || n < 0) throw checkpointError(`tensor ${what} holds ${describe(v)} ${String(v)}`);
    return n;
  });
}

interface StorageInfo {
  readonly key: string;
  /** torch dtype of the storage's elements; null for UntypedStorage (bytes). */
  readonly dtype: string | null;
  /** Bytes the tensor may address, from `byteOffset`. */
  readonly byteLength: number;
  readonly byteOffset: number;
}

export class Interpreter {
  private readonly cache = new Map<object, Item>();
  private readonly storages = new Map<string, { dtype: string | null; bytes: number }>();
  private readonly maxNesting: number;

  constructor(
    private readonly container: Container,
    options: InterpretOptions = {},
  ) {
    this.maxNesting = options.maxNesting ?? 200;
  }

  interpret(value: PyValue, depth = 0): Item {
    if (depth > this.maxNesting) {
      throw new SafetensorError("PickleLimit", `checkpoint nests deeper than ${this.maxNesting} containers`);
    }
    if (value !== null && typeof value === "object") {
      const cached = this.cache.get(value);
      if (cached) return cached;
      // A placeholder guards against cycles (a list that holds itself).
      this.cache.set(value, { kind: "other", type: `recursive ${describe(value)}` });
      const item = this.build(value, depth);
      this.cache.set(value, item);
      return item;
    }
    return { kind: "other", type: describe(value) };
  }

  private build(value: PyValue & object, depth: number): Item {
    if (value instanceof PyDict) {
      return {
        kind: "dict",
        type: value.type,
        entries: value.entries.map(([k, v]) => [k, this.interpret(v, depth + 1)] as const),
      };
    }
    if (value instanceof PyTuple || value instanceof PyList) {
      return { kind: "sequence", type: describe(value), items: value.items.map((v) => this.interpret(v, depth + 1)) };
    }
    if (value instanceof PyPersistent) {
      if (this.container.format === "tar") return this.tarTensor(value);
      return { kind: "unsupported", reason: "a bare storage (not a tensor)" };
    }
    if (value instanceof PyCall) {
      const blocked = blockedGlobals(value);
      if (blocked.size) return { kind: "blocked", globals: [...blocked] };
      if (value.callee instanceof PyGlobal) return this.call(value, qualified(value.callee), depth);
      return { kind: "other", type: describe(value) };
    }
    if (value instanceof PyGlobal && !value.allowed)
      return { kind: "blocked", globals: [`${value.module}.${value.name}`] };
    return { kind: "other", type: describe(value) };
  }

  private call(value: PyCall, name: string, depth: number): Item {
    const args = value.args instanceof PyTuple ? value.args.items : null;
    if (!args) return { kind: "other", type: describe(value) };
    switch (name) {
      case "torch._utils._rebuild_tensor":
      case "torch._utils._rebuild_tensor_v2":
      case "torch._utils._rebuild_tensor_v3":
        return this.tensor(args, name.endsWith("v3"), "tensor");
      case "torch._utils._rebuild_parameter":
      case "torch._utils._rebuild_parameter_with_state": {
        const data = this.interpret(args[0] ?? null, depth + 1);
        if (data.kind !== "tensor") return data;
        return { kind: "tensor", tensor: { ...data.tensor, origin: "parameter" } };
      }
      case "torch._tensor._rebuild_from_type_v2": {
        // (func, new_type, args, state): a Parameter or plain Tensor rebuilt by an allowlisted func.
        const type = args[1];
        const typeName = type instanceof PyGlobal ? qualified(type) : "";
        if (typeName !== "torch.nn.parameter.Parameter" && typeName !== "torch.Tensor") {
          return { kind: "unsupported", reason: `a tensor subclass ${typeName || describe(type ?? null)}` };
        }
        const inner = args[0] instanceof PyGlobal ? new PyCall(args[0], args[2] ?? null, "reduce", value.offset) : null;
        return inner ? this.interpret(inner, depth + 1) : { kind: "other", type: describe(value) };
      }
      case "numpy.core.multiarray._reconstruct":
      case "numpy._core.multiarray._reconstruct":
        return this.ndarray(value);
      case "numpy.core.multiarray.scalar":
      case "numpy._core.multiarray.scalar":
        return this.npScalar(args);
      default: {
        const reason = UNSUPPORTED_REBUILDS.get(name);
        return reason ? { kind: "unsupported", reason } : { kind: "other", type: describe(value) };
      }
    }
  }

  private storageOf(pid: PyValue): StorageInfo {
    const items = itemsOf(pid);
    if (items === null || items[0] !== "storage") {
      throw checkpointError(
        `persistent id is a ${describe(pid)}${items ? ` starting with ${describe(items[0])}` : ""}, not a storage`,
      );
    }
    const [, type, key, , numelValue, viewMetadata] = items;
    const legacy = this.container.format === "legacy";
    if (items.length !== (legacy ? 6 : 5)) throw checkpointError(`storage persistent id has ${items.length} fields`);
    if (typeof key !== "string") throw checkpointError(`storage key is a ${describe(key ?? null)}`);
    if (!(type instanceof PyGlobal) || !type.allowed)
      throw checkpointError(`storage ${quoteName(key)} has type ${describe(type ?? null)}`);
    const className = type.name;
    const untyped = className === "UntypedStorage";
    const dtype = untyped ? null : (STORAGE_DTYPES.get(className) ?? null);
    const elementSize = untyped ? 1 : storageElementSize(className);
    if ((!untyped && dtype === null) || elementSize === null)
      throw checkpointError(`storage ${quoteName(key)} has type ${type.qualified}`);
    const numel = asInt(numelValue);
    if (numel === null || numel < 0)
      throw checkpointError(`storage ${quoteName(key)} has element count ${describe(numelValue ?? null)}`);
    const seen = this.storages.get(key);
    if (seen && (seen.dtype !== dtype || seen.bytes !== numel * elementSize)) {
      throw checkpointError(`storage ${quoteName(key)} is referenced with two different types or sizes`);
    }
    this.storages.set(key, { dtype, bytes: numel * elementSize });
    const bytes = this.container.storage(key);
    const length = bytes.kind === "range" ? bytes.length : bytes.bytes.length;
    if (length !== numel * elementSize) {
      throw checkpointError(
        `storage ${quoteName(key)} holds ${length} bytes, but its reference says ${numel} × ${elementSize}`,
      );
    }
    let byteOffset = 0;
    let byteLength = length;
    if (legacy && viewMetadata !== null && viewMetadata !== undefined) {
      // Legacy storage views: (view_key, offset, size) in elements of the root storage.
      const view = itemsOf(viewMetadata);
      const offset = asInt(view?.[1]);
      const size = asInt(view?.[2]);
      if (!view || offset === null || size === null || offset < 0 || size < 0 || offset + size > numel) {
        throw checkpointError(`storage view of ${quoteName(key)} is malformed or outside it`);
      }
      byteOffset = offset * elementSize;
      byteLength = size * elementSize;
    }
    return { key, dtype, byteLength, byteOffset };
  }

  private tensor(args: PyValue[], v3: boolean, origin: TensorRef["origin"]): Item {
    if (args.length < 4 || !(args[0] instanceof PyPersistent)) {
      throw checkpointError(
        `tensor rebuild with ${args.length} arguments${args.length ? ` (first a ${describe(args[0]!)})` : ""}`,
      );
    }
    const storage = this.storageOf(args[0].pid);
    let torchDtype = storage.dtype;
    if (v3) {
      const d = args[6];
      if (!(d instanceof PyGlobal) || d.module !== "torch")
        throw checkpointError(`tensor dtype is a ${describe(d ?? null)}`);
      torchDtype = d.name;
    }
    if (torchDtype === null) throw checkpointError("tensor over an untyped storage without a dtype");
    const offset = asInt(args[1]);
    if (offset === null || offset < 0) throw checkpointError(`tensor storage offset is ${describe(args[1]!)}`);
    const shape = dims(args[2], "size");
    const stride = dims(args[3], "stride");
    if (shape.length !== stride.length)
      throw checkpointError(`tensor size has ${shape.length} dims but stride ${stride.length}`);
    const elementSize = TORCH_ELEMENT_SIZE.get(torchDtype);
    if (elementSize === undefined) throw checkpointError(`unknown torch dtype ${torchDtype}`);
    const dtype = TORCH_TO_SAFETENSORS.get(torchDtype);
    if (!dtype) {
      return {
        kind: "unsupported",
        reason: torchDtype.startsWith("q")
          ? `a quantized tensor (torch.${torchDtype}; safetensors has no quantized dtypes)`
          : `torch.${torchDtype} has no safetensors dtype`,
      };
    }
    checkBounds(shape, stride, offset, elementSize, storage.byteLength, storage.key);
    return {
      kind: "tensor",
      tensor: {
        dtype,
        sourceDtype: torchDtype,
        elementSize,
        shape,
        stride,
        offset,
        source: { kind: "storage", key: storage.key, byteOffset: storage.byteOffset },
        swap: this.container.bigEndian && elementSize > 1,
        origin,
      },
    };
  }

  private tarTensor(pid: PyPersistent): Item {
    const key = typeof pid.pid === "string" || typeof pid.pid === "number" ? String(pid.pid) : null;
    const t = key === null ? undefined : this.container.tarTensors?.get(key);
    if (!t) return { kind: "unsupported", reason: `tar persistent id ${describe(pid.pid)} is not a saved tensor` };
    const storage = this.container.tarStorages?.get(t.storageKey);
    if (!storage) throw checkpointError(`tar checkpoint: tensor ${key} references missing storage ${t.storageKey}`);
    const className = storage.type instanceof PyGlobal ? storage.type.name : "";
    const torchDtype = STORAGE_DTYPES.get(className);
    const elementSize = storageElementSize(className);
    if (!torchDtype || elementSize === null)
      throw checkpointError(`tar checkpoint: storage ${t.storageKey} has type ${describe(storage.type)}`);
    const dtype = TORCH_TO_SAFETENSORS.get(torchDtype);
    if (!dtype) return { kind: "unsupported", reason: `torch.${torchDtype} has no safetensors dtype` };
    if (t.shape.some((d) => d < 0) || t.stride.some((d) => d < 0) || t.offset < 0)
      throw checkpointError("tar checkpoint: negative tensor geometry");
    checkBounds(t.shape, t.stride, t.offset, elementSize, storage.numel * elementSize, t.storageKey);
    return {
      kind: "tensor",
      tensor: {
        dtype,
        sourceDtype: torchDtype,
        elementSize,
        shape: t.shape,
        stride: t.stride,
        offset: t.offset,
        source: { kind: "storage", key: storage.root, byteOffset: storage.offset * elementSize },
        swap: false,
        origin: "tensor",
      },
    };
  }

  private npDtype(value: PyValue | undefined): { dtype: Dtype | null; descr: string; size: number; swap: boolean } {
    if (
      !(value instanceof PyCall) ||
      !(value.callee instanceof PyGlobal) ||
      qualified(value.callee) !== "numpy.dtype"
    ) {
      throw checkpointError(`numpy array dtype is a ${describe(value ?? null)}`);
    }
    const args = itemsOf(value.args);
    const descr = args?.[0];
    if (typeof descr !== "string") throw checkpointError("numpy dtype without a type string");
    const state = itemsOf(value.state ?? null);
    const order = typeof state?.[1] === "string" ? state[1] : "|";
    const m = /^[<>=|]?([a-zA-Z])(\d+)$/.exec(descr);
    const key = m ? `${m[1]}${m[2]}` : descr;
    const size = m ? Number(m[2]) : 0;
    const swap = (order === ">" || descr.startsWith(">")) && size > 1;
    return { dtype: NUMPY_TO_SAFETENSORS.get(key) ?? null, descr: `${order === "|" ? "" : order}${descr}`, size, swap };
  }

  private ndarray(value: PyCall): Item {
    const state = itemsOf(value.state ?? null);
    if (state === null || state.length !== 5) return { kind: "other", type: "numpy.ndarray without its state" };
    const shape = dims(state[1], "numpy shape");
    const dt = this.npDtype(state[2]);
    const fortran = state[3] === true || state[3] === 1;
    const raw = state[4];
    if (!dt.dtype) return unstorable(`numpy array of dtype ${dt.descr}`, dt.descr);
    const data = raw instanceof PyBytes ? raw.bytes : typeof raw === "string" ? latin1Bytes(raw) : null;
    if (!data) return { kind: "unsupported", reason: `a numpy array whose data is a ${describe(raw ?? null)}` };
    const numel = shape.reduce((a, b) => a * b, 1);
    if (data.length !== numel * dt.size) {
      throw checkpointError(`numpy array of ${numel} × ${dt.size} bytes carries ${data.length} bytes`);
    }
    return inlineTensor(dt, shape, contiguousStrides(shape, fortran), data);
  }

  private npScalar(args: PyValue[]): Item {
    const dt = this.npDtype(args[0]);
    const raw = args[1];
    if (!dt.dtype) return unstorable(`numpy scalar of dtype ${dt.descr}`, dt.descr);
    if (!(raw instanceof PyBytes) || raw.bytes.length !== dt.size)
      return { kind: "other", type: `numpy scalar ${dt.descr} without its ${dt.size} bytes` };
    return inlineTensor(dt, [], [], raw.bytes);
  }
}

/**
 * A numpy value with no safetensors dtype: numbers (complex128, long double) are refused like torch's complex128;
 * strings, objects, records and datetimes are not weights, so they are reported as non-tensor entries.
 */
function unstorable(what: string, descr: string): Item {
  return /^[<>=|]?[fc]/.test(descr)
    ? { kind: "unsupported", reason: `a ${what} (no safetensors dtype)` }
    : { kind: "other", type: what };
}

function inlineTensor(
  dt: { dtype: Dtype | null; descr: string; size: number; swap: boolean },
  shape: number[],
  stride: number[],
  bytes: Uint8Array,
): Item {
  return {
    kind: "tensor",
    tensor: {
      dtype: dt.dtype!,
      sourceDtype: dt.descr,
      elementSize: dt.size,
      shape,
      stride,
      offset: 0,
      source: { kind: "inline", bytes },
      swap: dt.swap,
      origin: "ndarray",
    },
  };
}

export function contiguousStrides(shape: readonly number[], fortran = false): number[] {
  const stride = new Array<number>(shape.length);
  let step = 1;
  for (let k = 0; k < shape.length; k++) {
    const d = fortran ? k : shape.length - 1 - k;
    stride[d] = step;
    step *= Math.max(shape[d]!, 1);
  }
  return stride;
}

function checkBounds(
  shape: readonly number[],
  stride: readonly number[],
  offset: number,
  elementSize: number,
  byteLength: number,
  key: string,
): void {
  if (shape.some((d) => d === 0)) return;
  let last = offset;
  for (let d = 0; d < shape.length; d++) last += (shape[d]! - 1) * stride[d]!;
  if (!Number.isSafeInteger(last) || (last + 1) * elementSize > byteLength) {
    throw checkpointError(
      `tensor over storage ${quoteName(key)} reaches element ${last}, past its ${byteLength / elementSize} elements`,
    );
  }
}
