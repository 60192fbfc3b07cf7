/**
 * The tensors of a header read by the native scanner, kept as the scanner's numbers: names are looked up in a Map,
 * and a tensor's `TensorInfo` object is made the first time it is asked for. Opening a file then costs one Map entry
 * per tensor instead of four objects. What users see: a process opening the 23 valid corpus files 100 times each
 * and reading one tensor of each took 0.668 s cpu and 61.9 MiB peak, and 0.744 s (ratio 1.09, spread 1.03-1.18 over
 * 11 interleaved runs) and 72.2 MiB with every info made at open (bench/README.md, issue 19).
 */
import type { Dtype, DtypeInfo } from "./dtypes.js";
import type { TensorInfo } from "./header.js";

/**
 * The `ndim` dimensions from `numbers[at]` on, as a new array of small integers (frozen by the caller). Numbers read
 * from a Float64Array are heap numbers: stored as they are into a new array, they moved its elements from small
 * integers to doubles, one transition per shape (and a double array costs more to freeze): ~5 k instructions per
 * tensor of a cold open (callgrind). `v | 0` is a small integer below 2^30.
 */
function shapeAt(numbers: Float64Array, at: number, ndim: number): number[] {
  const shape: number[] = [];
  for (let d = 0; d < ndim; d++) {
    const v = numbers[at + d]!;
    shape.push(v < 0x40000000 ? v | 0 : v);
  }
  return shape;
}

/** What `locate` answers (one object, reused by every call). */
class TensorSpan {
  dtype: Dtype = "BOOL";
  shape: readonly number[] = EMPTY_SHAPE;
  begin = 0;
  byteLength = 0;
}

const EMPTY_SHAPE: readonly number[] = Object.freeze([]);

export class CompactTensors implements ReadonlyMap<string, TensorInfo> {
  /** How many tensors: `dtypes` and `starts` may be longer (holes at the end). */
  readonly #count: number;
  /** The header's text, and per tensor its name's [start, end) in it at `#starts[i] - 4` in `#numbers`. */
  readonly #text: string;
  /** The names, made from `#text` when first needed: opening a file and closing it makes none. */
  #nameList: readonly string[] | undefined;
  /** Name to position, made on the first lookup by name (opening a file and loadFile need none). */
  #index: Map<string, number> | undefined;
  /** The position after the last one looked up by name. */
  #next = 0;
  readonly #dtypes: readonly DtypeInfo[];
  /** Per tensor, where its `ndim, dims…, begin, end` start in `#numbers` (its name's bounds are the 4th and 3rd before). */
  readonly #starts: readonly number[];
  readonly #numbers: Float64Array;
  /** Made on first use, as `#shapes` (opening and closing a file needs neither). */
  #infos: (TensorInfo | undefined)[] | undefined;
  /** Per tensor, its frozen shape once made (shared with its info, and with the next tensors of the same shape). */
  #shapes: (readonly number[] | undefined)[] | undefined;
  #lastShape: readonly number[] | undefined;
  /** What `locate` answers, reused by every call. */
  readonly #span = new TensorSpan();

  /**
   * Takes ownership of every argument; the names the numbers give must be distinct. Names are sliced from `text`
   * when first asked for: on a warm open of the benchmark's 48-tensor checkpoint, slicing them at open was ~1.5 µs
   * of ~18 (opening and closing a file never needs them).
   */
  constructor(
    text: string,
    dtypes: readonly DtypeInfo[],
    starts: readonly number[],
    numbers: Float64Array,
    count = starts.length,
  ) {
    this.#count = count;
    this.#text = text;
    this.#dtypes = dtypes;
    this.#starts = starts;
    this.#numbers = numbers;
  }

  get size(): number {
    return this.#count;
  }

  get #names(): readonly string[] {
    if (this.#nameList === undefined) {
      const text = this.#text;
      const numbers = this.#numbers;
      const starts = this.#starts;
      const names: string[] = [];
      for (let i = 0; i < this.#count; i++) {
        const at = starts[i]!;
        names.push(text.slice(numbers[at - 4]!, numbers[at - 3]!));
      }
      this.#nameList = names;
    }
    return this.#nameList;
  }

  #lookup(): Map<string, number> {
    if (this.#index === undefined) {
      const index = new Map<string, number>();
      const names = this.#names;
      for (let i = 0; i < names.length; i++) index.set(names[i]!, i);
      this.#index = index;
    }
    return this.#index;
  }

  /**
   * Position of `name`: first the one after the last found, so that reading every tensor in file order (the way
   * `offsetKeys()` lists them) builds no index: making it hashed every name and filled a Map in the first lookup,
   * ~30 µs of a cold first `getTensor` on 48 tensors.
   */
  #indexOf(name: string): number | undefined {
    const next = this.#next;
    const names = this.#names;
    if (next < names.length && names[next] === name) {
      this.#next = next + 1;
      return next;
    }
    const i = this.#lookup().get(name);
    if (i !== undefined) this.#next = i + 1;
    return i;
  }

  has(name: string): boolean {
    return this.#indexOf(name) !== undefined;
  }

  get(name: string): TensorInfo | undefined {
    const i = this.#indexOf(name);
    return i === undefined ? undefined : this.#at(i);
  }

  #at(i: number): TensorInfo {
    this.#infos ??= new Array(this.#count);
    let info = this.#infos[i];
    if (info === undefined) {
      const numbers = this.#numbers;
      const at = this.#starts[i]!;
      const ndim = numbers[at]!;
      const begin = numbers[at + 1 + ndim]!;
      const end = numbers[at + 2 + ndim]!;
      // The same fields in the same order as the full reader's infos.
      info = {
        name: this.#names[i]!,
        dtype: this.#dtypes[i]!.name,
        shape: this.#shape(i),
        dataOffsets: [begin, end],
        byteLength: end - begin,
      };
      this.#infos[i] = info;
    }
    return info;
  }

  /**
   * Tensor i's shape, frozen, made once; the previous shape made when the dims are the same (a model's layers repeat
   * a few shapes, and a frozen array cannot be changed by any of the tensors sharing it): freezing a fresh array is
   * a runtime call, made before V8 has optimized anything.
   */
  #shape(i: number): readonly number[] {
    this.#shapes ??= new Array(this.#count);
    let shape = this.#shapes[i];
    if (shape === undefined) {
      const numbers = this.#numbers;
      const at = this.#starts[i]! + 1;
      const ndim = numbers[at - 1]!;
      const last = this.#lastShape;
      let same = last !== undefined && last.length === ndim;
      for (let d = 0; same && d < ndim; d++) same = last![d] === numbers[at + d];
      shape = same ? last! : Object.freeze(shapeAt(numbers, at, ndim));
      this.#lastShape = shape;
      this.#shapes[i] = shape;
    }
    return shape;
  }

  /**
   * What reading tensor `name` takes, making no TensorInfo: its dtype, frozen shape, begin in the data region and
   * byte length, in an object every call reuses (read it before the next call); undefined when there is no such
   * tensor. `getTensor` runs this before V8 has optimized anything: with the info (an object and an array literal)
   * made instead, 48 first getTensor calls on a mapped file took 0.95 M instructions, 0.88 M with this (callgrind,
   * the benchmark's touch_all in a fresh process).
   */
  locate(name: string): { dtype: Dtype; shape: readonly number[]; begin: number; byteLength: number } | undefined {
    const i = this.#indexOf(name);
    if (i === undefined) return undefined;
    const numbers = this.#numbers;
    const at = this.#starts[i]! + 1 + numbers[this.#starts[i]!]!;
    const span = this.#span;
    span.dtype = this.#dtypes[i]!.name;
    span.shape = this.#shape(i);
    span.begin = numbers[at]!;
    span.byteLength = numbers[at + 1]! - numbers[at]!;
    return span;
  }

  /**
   * Calls `fn` for every tensor in file order with what reading it takes, making no `TensorInfo` (the shape is a
   * fresh frozen array): what `loadFile` uses to make one tensor per entry at the least cost.
   */
  forEachSpan(
    fn: (name: string, dtype: DtypeInfo, shape: readonly number[], begin: number, byteLength: number) => void,
  ): void {
    const numbers = this.#numbers;
    const names = this.#names;
    for (let i = 0; i < names.length; i++) {
      let at = this.#starts[i]!;
      const ndim = numbers[at++]!;
      const shape = shapeAt(numbers, at, ndim);
      at += ndim;
      fn(names[i]!, this.#dtypes[i]!, Object.freeze(shape), numbers[at]!, numbers[at + 1]! - numbers[at]!);
    }
  }

  /** Every info, made in one plain loop (iterators over them need no generator). */
  #all(): TensorInfo[] {
    const count = this.#count;
    for (let i = 0; i < count; i++) this.#at(i);
    return (this.#infos ?? []) as TensorInfo[];
  }

  /** The names in file order, as a new array. */
  names(): string[] {
    return this.#names.slice();
  }

  keys(): MapIterator<string> {
    return this.#names.values();
  }

  values(): MapIterator<TensorInfo> {
    return this.#all().values();
  }

  entries(): MapIterator<[string, TensorInfo]> {
    return this.#all()
      .map((info): [string, TensorInfo] => [info.name, info])
      .values();
  }

  [Symbol.iterator](): MapIterator<[string, TensorInfo]> {
    return this.entries();
  }

  forEach(
    callback: (value: TensorInfo, key: string, map: ReadonlyMap<string, TensorInfo>) => void,
    thisArg?: unknown,
  ): void {
    for (const info of this.#all()) callback.call(thisArg, info, info.name, this);
  }

  get [Symbol.toStringTag](): string {
    return "CompactTensors";
  }
}
