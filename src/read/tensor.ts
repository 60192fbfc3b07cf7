import { fromFloat32, toFloat32 } from "../codecs/index.js";
import { byteSize, byteSizeNumber, type Dtype, dtypeInfo, dtypeOf, type TypedArrayName } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";
import { type Element, formatTensor, type Nested, toArray, toNested } from "./tensor-values.js";

/** The TypedArrays `Tensor.typed` returns. */
export type TypedArray =
  | Uint8Array
  | Int8Array
  | Uint16Array
  | Int16Array
  | Uint32Array
  | Int32Array
  | Float32Array
  | Float64Array
  | BigInt64Array
  | BigUint64Array;

type TypedArrayConstructor = {
  new (buffer: ArrayBufferLike, byteOffset: number, length: number): TypedArray;
  new (length: number): TypedArray;
  readonly BYTES_PER_ELEMENT: number;
};

const CONSTRUCTORS: Record<TypedArrayName, TypedArrayConstructor> = {
  Uint8Array,
  Int8Array,
  Uint16Array,
  Int16Array,
  Uint32Array,
  Int32Array,
  Float32Array,
  Float64Array,
  BigInt64Array,
  BigUint64Array,
};

const LITTLE_ENDIAN_HOST = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** The dtype's name when `data` holds exactly the bytes `dtype` and `shape` need; `UnknownDtype` or `InvalidTensor`. */
function checkedDtype(dtype: Dtype | string, shape: readonly number[], data: Uint8Array): Dtype {
  const info = dtypeInfo(String(dtype));
  if (!info) throw new SafetensorError("UnknownDtype", `unknown dtype ${JSON.stringify(dtype)}`);
  const quick = byteSizeNumber(info.name, shape);
  const size = quick === undefined ? byteSize(info.name, shape) : quick;
  if (size === null || (typeof size === "number" ? data.byteLength !== size : BigInt(data.byteLength) !== size)) {
    throw new SafetensorError(
      "InvalidTensor",
      `${info.name} [${shape.join(", ")}] needs ${size ?? "a whole number of"} bytes, got ${data.byteLength}`,
    );
  }
  return info.name;
}

/**
 * A tensor: dtype, shape and its raw little-endian row-major bytes. `data` may be a view into a larger buffer (a
 * file in memory, a mapped file): copy it (`tensor.clone()`) to keep it beyond the source's lifetime.
 */
export class Tensor {
  // `declare`: assigned in the constructor (and TrustedTensor) only. A declared field would make V8 compile and run a
  // field initializer for every tensor: the first loadFile of a process (what the reference's load_file is timed
  // against) compiled 16% fewer instructions without (callgrind, 2.03 M -> 1.71 M, the bench's 48-tensor checkpoint,
  // Node 20).
  declare readonly dtype: Dtype;
  declare readonly shape: readonly number[];
  /**
   * The bytes. A view of a mapped file becomes empty (length 0) when the file is closed, never dangling; the methods
   * below then throw `Closed` instead of quietly returning nothing.
   */
  declare readonly data: Uint8Array;

  constructor(dtype: Dtype | string, shape: readonly number[], data: Uint8Array) {
    // Tensors of a validated header are made by TrustedTensor (below), which skips these checks.
    this.dtype = checkedDtype(dtype, shape, data);
    this.shape = Object.freeze(shape.slice());
    this.data = data;
  }

  /** Number of elements (1 for a scalar). */
  get numel(): number {
    let n = 1;
    for (const dim of this.shape) n *= dim;
    return n;
  }

  get byteLength(): number {
    return liveData(this).byteLength;
  }

  /**
   * The elements as a TypedArray of the dtype's storage type (see `DtypeInfo.typedArray`): zero-copy when the bytes
   * are aligned for it, a copy otherwise (files from writers that do not pad their header).
   */
  typed(): TypedArray {
    const info = dtypeOf(this.dtype);
    const Ctor = CONSTRUCTORS[info.typedArray];
    const size = Ctor.BYTES_PER_ELEMENT;
    const data = liveData(this);
    const length = data.byteLength / size;
    // An empty tensor may sit on a detached buffer, which no typed array can be constructed over.
    if (length === 0) return new Ctor(0);
    if (data.byteOffset % size === 0 && (LITTLE_ENDIAN_HOST || size === 1)) {
      return new Ctor(data.buffer, data.byteOffset, length);
    }
    const copy = data.slice();
    if (!LITTLE_ENDIAN_HOST) swapBytes(copy, size);
    return new Ctor(copy.buffer, 0, length);
  }

  /** Decode to float32 (every dtype but C64; integers are converted to the nearest float). */
  toFloat32(): Float32Array {
    return toFloat32(this.dtype, liveData(this), { count: this.numel });
  }

  /** Encode float32 values (round to nearest even, with each format's overflow and NaN rules). */
  static fromFloat32(dtype: Dtype, shape: readonly number[], values: Float32Array | readonly number[]): Tensor {
    return new Tensor(dtype, shape, fromFloat32(dtype, values));
  }

  /** Wrap a TypedArray's bytes (no copy). The caller picks the dtype; sizes must agree. */
  static fromTypedArray(dtype: Dtype, shape: readonly number[], array: ArrayBufferView): Tensor {
    return new Tensor(dtype, shape, new Uint8Array(array.buffer, array.byteOffset, array.byteLength));
  }

  /**
   * A tensor over a TypedArray's bytes (no copy): `Tensor.from(new Float32Array([1, 2, 3, 4]), [2, 2])`. The dtype
   * defaults to the array's (Float32Array F32, Int32Array I32, Uint8Array U8, BigInt64Array I64...); give it for the
   * dtypes stored in another array type: "F16" or "BF16" for a Uint16Array of their bits, "BOOL" or an F8 kind for
   * a Uint8Array, "C64" for a Float32Array of (re, im) pairs. The shape defaults to one axis of the array's length.
   * Float values to encode into F16, BF16 or F8: `Tensor.fromFloat32`.
   */
  static from(array: TypedArray, shape?: readonly number[], dtype?: Dtype): Tensor {
    const kind = array.constructor.name as TypedArrayName;
    const chosen = dtype ?? DEFAULT_DTYPES[kind];
    if (chosen === undefined || CONSTRUCTORS[kind] === undefined) {
      throw new SafetensorError("InvalidTensor", `Tensor.from takes a TypedArray, got ${kind}`);
    }
    const info = dtypeInfo(String(chosen));
    if (!info) throw new SafetensorError("UnknownDtype", `unknown dtype ${JSON.stringify(chosen)}`);
    if (info.typedArray !== kind) {
      const hint =
        info.isFloat && kind === "Float32Array"
          ? ` (to encode float32 values: Tensor.fromFloat32("${info.name}", shape, values))`
          : "";
      throw new SafetensorError(
        "InvalidTensor",
        `${info.name} is stored in a ${info.typedArray}, not a ${kind}${hint}`,
      );
    }
    let bytes = new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
    if (!LITTLE_ENDIAN_HOST && array.BYTES_PER_ELEMENT > 1) {
      bytes = bytes.slice();
      swapBytes(bytes, array.BYTES_PER_ELEMENT);
    }
    const elements = info.name === "C64" ? array.length / 2 : array.length;
    return new Tensor(info.name, shape ?? [elements], bytes);
  }

  /** A copy that owns its bytes. */
  clone(): Tensor {
    return new Tensor(this.dtype, this.shape, liveData(this).slice());
  }

  /**
   * Every element in a flat array, row-major: numbers (F16, BF16, F8 and the other small floats decoded), bigints
   * for I64 and U64, booleans for BOOL, `[re, im]` for C64. For small tensors: over `maxElements` (default
   * `DEFAULT_MAX_ARRAY_ELEMENTS`, 1 Mi) is `TooLarge` (`typed()` and `toFloat32()` are the compact forms).
   */
  toArray(options?: { maxElements?: number }): Element[] {
    return toArray(valuesOf(this), options);
  }

  /** The elements as arrays nested by the shape (`[[1, 2], [3, 4]]`; a scalar is its value), as `toArray` limits. */
  toNested(options?: { maxElements?: number }): Nested {
    return toNested(valuesOf(this), options);
  }

  /**
   * `Tensor(F32, [2, 3]) [[1, 2, 3], [4, 5, 6]]`: the dtype, shape and values as numpy and torch print them, the
   * middle of each axis left out ("...") past 1,000 elements; only the values shown are read.
   */
  toString(): string {
    if (released(this)) return `Tensor(${this.dtype}, [${this.shape.join(", ")}]) <released>`;
    return formatTensor(valuesOf(this));
  }

  /** What `console.log(tensor)` and `util.inspect` print in Node (the same as `toString()`). */
  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }
}

// Module functions, not private methods: a class with private methods gives each instance a brand that the methods
// check, which TrustedTensor's instances (below) would not have.

/**
 * Whether the memory was released: the bytes became empty (file closed, buffer freed or detached) where the shape
 * says there are some. A check of the shape, not a private field holding the byte length: a class with a private
 * field runs a field initializer for every instance, compiled on the first.
 */
function released(tensor: Tensor): boolean {
  return tensor.data.byteLength === 0 && tensor.numel !== 0;
}

/** `data`, or `Closed` when the memory it viewed has been released (file closed, buffer freed or detached). */
function liveData(tensor: Tensor): Uint8Array {
  const data = tensor.data;
  if (data.byteLength === 0 && released(tensor)) {
    throw new SafetensorError(
      "Closed",
      `the tensor's memory was released (its file was closed or its buffer freed); copy it first with clone() or getTensor(name, { memory: "owned" })`,
    );
  }
  return data;
}

function valuesOf(tensor: Tensor): { dtype: Dtype; shape: readonly number[]; data: Uint8Array } {
  return { dtype: tensor.dtype, shape: tensor.shape, data: liveData(tensor) };
}

/** The dtype `Tensor.from` gives each TypedArray when none is named. */
const DEFAULT_DTYPES: Record<TypedArrayName, Dtype> = {
  Uint8Array: "U8",
  Int8Array: "I8",
  Uint16Array: "U16",
  Int16Array: "I16",
  Uint32Array: "U32",
  Int32Array: "I32",
  Float32Array: "F32",
  Float64Array: "F64",
  BigInt64Array: "I64",
  BigUint64Array: "U64",
};

function swapBytes(bytes: Uint8Array, size: number): void {
  for (let i = 0; i < bytes.length; i += size) bytes.subarray(i, i + size).reverse();
}

/**
 * The tensor described by a validated header entry, over exactly its bytes: skips the constructor's checks (the
 * header's validation made them) and shares the entry's frozen shape. Reading a file makes one per tensor, and this
 * runs before V8 has optimized anything, so the checks were a measurable part of a cold `loadFile`.
 */
export function tensorOfInfo(
  info: { readonly dtype: Dtype; readonly shape: readonly number[] },
  data: Uint8Array,
): Tensor {
  if (!Object.isFrozen(info.shape)) return new Tensor(info.dtype, info.shape, data);
  return trustedTensor(info.dtype, info.shape, data);
}

/**
 * `tensorOfInfo` for a caller that checked the header itself (loadFile's one-call path): `shape` frozen, `data`
 * exactly the bytes `dtype` and `shape` need.
 */
// biome-ignore format: the parentheses make V8 compile it with the module (read/node-files.ts loadMapped)
export const trustedTensor = (function trustedTensor(dtype: Dtype, shape: readonly number[], data: Uint8Array): Tensor {
  return new TrustedTensor(dtype, shape, data);
});

/**
 * A Tensor made without the constructor's checks, for the tensors of a validated header (shape frozen, exactly the
 * bytes dtype and shape need). `instanceof Tensor`, `constructor` and every method are Tensor's: its prototype is
 * Tensor.prototype. A plain function in parentheses, which V8 compiles with the module. A class constructor is
 * compiled at its first `new`, from a full parse of the class member, and that first `new` also works out the
 * instances' expected property count (JSFunction::CalculateExpectedNofProperties): 84-92 k instructions inside a
 * process's first loadFile on Node 20-26. And Tensor's constructor, run 48 times there through a trusted branch, was
 * queued for V8's baseline compiler in that call (see read/node-files.ts addViews).
 *
 * Measured with this commit's other first-call changes (addViews, viewNames, mapViews): callgrind, the bench's
 * 48-tensor checkpoint, instructions of the first loadFile, Node 20 / 22 / 24 / 26: the bench's worker (after gc())
 * 0.92 / 0.67 / 0.69 / 0.71 M -> 0.52 / 0.49 / 0.49 / 0.52 M; a script that imports and calls loadFile 0.93 / 0.64 /
 * 0.65 / 0.67 M -> 0.73 / 0.46 / 0.46 / 0.48 M (Node 20 still compiles V8's baseline batch there: the import leaves
 * its queue nearly full); issue 18's probe (openFile first) 0.67 / 0.63 / 0.64 / 0.66 M -> 0.48 / 0.45 / 0.45 / 0.47
 * M. Wall time of that script's loadFile after a gc(), median of 15 fresh processes a side, interleaved, load ~8 on 2
 * cores: 0.68 / 0.66 / 0.65 / 0.65 ms -> 0.46 / 0.54 / 0.55 / 0.51 ms.
 */
// biome-ignore format: the parentheses make V8 compile it with the module (see above)
export const TrustedTensor = (function TrustedTensor(this: { dtype: Dtype; shape: readonly number[]; data: Uint8Array }, dtype: Dtype, shape: readonly number[], data: Uint8Array): void {
  this.dtype = dtype;
  this.shape = shape;
  this.data = data;
}) as unknown as new (dtype: Dtype, shape: readonly number[], data: Uint8Array) => Tensor;
TrustedTensor.prototype = Tensor.prototype;
