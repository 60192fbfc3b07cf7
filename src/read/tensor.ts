import { fromFloat32, toFloat32 } from "../codecs/index.js";
import { byteSize, byteSizeNumber, type Dtype, dtypeInfo, dtypeOf, type TypedArrayName } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";

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

/** Set only inside `tensorOfInfo`. */
let trusting = false;

const LITTLE_ENDIAN_HOST = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/**
 * A tensor: dtype, shape and its raw little-endian row-major bytes. `data` may be a view into a larger buffer (a
 * file in memory, a mapped file): copy it (`tensor.clone()`) to keep it beyond the source's lifetime.
 */
export class Tensor {
  readonly dtype: Dtype;
  readonly shape: readonly number[];
  /**
   * The bytes. A view of a mapped file becomes empty (length 0) when the file is closed, never dangling; the methods
   * below then throw `Closed` instead of quietly returning nothing.
   */
  readonly data: Uint8Array;
  /** The byte length the tensor was made with, to tell a detached (emptied) buffer from an empty tensor. */
  readonly #byteLength: number;

  constructor(dtype: Dtype | string, shape: readonly number[], data: Uint8Array) {
    if (trusting) {
      // A validated header's info and exactly its bytes (`tensorOfInfo`): nothing to check, shape already frozen.
      this.dtype = dtype as Dtype;
      this.shape = shape;
      this.data = data;
      this.#byteLength = data.byteLength;
      return;
    }
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
    this.dtype = info.name;
    this.shape = Object.freeze(shape.slice());
    this.data = data;
    this.#byteLength = data.byteLength;
  }

  /** `data`, or `Closed` when the memory it viewed has been released (file closed, buffer freed or detached). */
  #live(): Uint8Array {
    const data = this.data;
    if (data.byteLength !== this.#byteLength) {
      throw new SafetensorError(
        "Closed",
        `the tensor's memory was released (its file was closed or its buffer freed); copy it first with clone() or getTensor(name, { memory: "owned" })`,
      );
    }
    return data;
  }

  /** Number of elements (1 for a scalar). */
  get numel(): number {
    let n = 1;
    for (const dim of this.shape) n *= dim;
    return n;
  }

  get byteLength(): number {
    return this.#live().byteLength;
  }

  /**
   * The elements as a TypedArray of the dtype's storage type (see `DtypeInfo.typedArray`): zero-copy when the bytes
   * are aligned for it, a copy otherwise (files from writers that do not pad their header).
   */
  typed(): TypedArray {
    const info = dtypeOf(this.dtype);
    const Ctor = CONSTRUCTORS[info.typedArray];
    const size = Ctor.BYTES_PER_ELEMENT;
    const data = this.#live();
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
    return toFloat32(this.dtype, this.#live(), { count: this.numel });
  }

  /** Encode float32 values (round to nearest even, with each format's overflow and NaN rules). */
  static fromFloat32(dtype: Dtype, shape: readonly number[], values: Float32Array | readonly number[]): Tensor {
    return new Tensor(dtype, shape, fromFloat32(dtype, values));
  }

  /** Wrap a TypedArray's bytes (no copy). The caller picks the dtype; sizes must agree. */
  static fromTypedArray(dtype: Dtype, shape: readonly number[], array: ArrayBufferView): Tensor {
    return new Tensor(dtype, shape, new Uint8Array(array.buffer, array.byteOffset, array.byteLength));
  }

  /** A copy that owns its bytes. */
  clone(): Tensor {
    return new Tensor(this.dtype, this.shape, this.#live().slice());
  }
}

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
export function trustedTensor(dtype: Dtype, shape: readonly number[], data: Uint8Array): Tensor {
  trusting = true;
  try {
    return new Tensor(dtype, shape, data);
  } finally {
    trusting = false;
  }
}
