/**
 * A lazily read safetensors file over any synchronous byte source: the header is read and validated once, tensors are
 * read on demand, each touching only its own bytes.
 */

import { CompactTensors } from "../format/compact-tensors.js";
import { isSafetensorError, SafetensorError } from "../format/errors.js";
import { type Header, type HeaderOptions, parseHeader, readHeaderLength, type TensorInfo } from "../format/header.js";
import { headerFromScan } from "../format/scanned.js";
import { OTHER_FORMAT_CODES, otherFormat, SNIFF_BYTES } from "../format/sniff.js";
import type { SyncByteSource } from "../io/source.js";
import { fetchRanges, gather, gatherPieces, type SliceIndex, type SlicePlan } from "../slice/index.js";
import { HeaderView } from "./header-view.js";
import { Tensor, tensorOfInfo, trustedTensor } from "./tensor.js";

/** Options of `getTensor` and of a slice's `get`. */
export interface GetTensorOptions {
  /**
   * "view" returns memory shared with the source when it can (mapped or in-memory files; valid until `close()`),
   * "owned" always returns memory the caller owns. Default "view".
   */
  memory?: "view" | "owned";
}

/** A tensor to be sliced: its shape and dtype, and `get` to read a numpy basic index of it. */
export interface TensorSlice {
  readonly name: string;
  readonly dtype: TensorInfo["dtype"];
  readonly shape: readonly number[];
  /** The read plan for an index: output shape, byte runs, covering span. */
  plan(index: string | readonly SliceIndex[]): SlicePlan;
  /**
   * Read `index` (numpy basic indexing: ints, slices with any bounds and steps, `...`; or its string form such as
   * `"0:8, :, ::2"`), touching only the bytes it selects.
   *
   * Returns a `Tensor` of the tensor's dtype and the slice's shape (numpy's: `"0"` drops the axis, `"0:1"` keeps it
   * with length 1), its bytes row-major: `.toFloat32()`, `.typed()`, `.toNested()` read them. When the selection is
   * one contiguous run of a mapped file (mmap backend), the bytes are a view of the mapping, valid until the file is
   * closed (`clone()` keeps them); otherwise, or with `{ memory: "owned" }`, they are memory the caller owns.
   */
  get(index: string | readonly SliceIndex[], options?: GetTensorOptions): Tensor;
}

/**
 * A header error on bytes that are recognisably another format (a PyTorch checkpoint, an index, a web page...)
 * says so in its message; the code stays the reference's.
 */
function nameOtherFormat(source: SyncByteSource, error: unknown): unknown {
  if (!isSafetensorError(error) || !OTHER_FORMAT_CODES.has(error.code)) return error;
  let found: ReturnType<typeof otherFormat>;
  try {
    found = otherFormat(source.read(0, Math.min(SNIFF_BYTES, source.byteLength)), { fileLength: source.byteLength });
  } catch {
    return error;
  }
  if (found === undefined) return error;
  return new SafetensorError(error.code, `${error.message} (the file is ${found.description}, not safetensors)`, {
    cause: error,
  });
}

/**
 * A safetensors file opened for reading (what `openFile` returns): the header is read and validated once, and each
 * tensor or slice read touches only its own bytes. Close it (or use `using`) when done: views it returned are then
 * released.
 */
export class SafetensorsFile extends HeaderView<SyncByteSource> {
  private constructor(source: SyncByteSource, header: Header) {
    super(source, header);
  }

  /** Read and validate the header of `source`. The file owns the source from here on and closes it. */
  static open(source: SyncByteSource, options: HeaderOptions = {}): SafetensorsFile {
    try {
      // The header from the bytes the source read at open when it still has them (no copy; nothing here keeps them).
      const head = source.head?.();
      const prefix =
        head != null && head.length >= 8 ? head : source.byteLength >= 8 ? source.read(0, 8) : new Uint8Array(0);
      const n = readHeaderLength(prefix, source.byteLength, options);
      const bytes = head != null && 8 + n <= head.length ? head.subarray(8, 8 + n) : source.read(8, n);
      const records = source.scanHeader?.(bytes);
      const header =
        (records && headerFromScan(records, bytes, source.byteLength)) ??
        parseHeader(bytes, source.byteLength, options);
      return new SafetensorsFile(source, header);
    } catch (error) {
      const named = nameOtherFormat(source, error);
      source.close();
      throw named;
    }
  }

  /** Read one tensor, touching only its bytes. */
  getTensor(name: string, options: GetTensorOptions = {}): Tensor {
    const tensors = this.header.tensors;
    if (tensors instanceof CompactTensors && options.memory !== "owned") {
      // A scanned header's tensor without its TensorInfo (see CompactTensors.locate).
      const span = tensors.locate(name);
      if (span !== undefined) {
        const data = this.live.read(this.header.dataStart + span.begin, span.byteLength);
        return trustedTensor(span.dtype, span.shape, data);
      }
    }
    const info = this.info(name);
    const source = this.live;
    const offset = this.header.dataStart + info.dataOffsets[0];
    const length = info.byteLength;
    return tensorOfInfo(
      info,
      options.memory === "owned" ? source.readOwned(offset, length) : source.read(offset, length),
    );
  }

  /** Raw bytes [offset, offset + length) of the file, in memory the caller owns. */
  readRange(offset: number, length: number): Uint8Array {
    return this.live.readOwned(offset, length);
  }

  /** A lazily read slice of a tensor. */
  getSlice(name: string): TensorSlice {
    const info = this.info(name);
    const plan = (index: string | readonly SliceIndex[]) => this.slicePlan(name, index);
    return {
      name,
      dtype: info.dtype,
      shape: info.shape,
      plan,
      get: (index, options = {}) => {
        const slicePlan = plan(index);
        const data = this.readPlan(name, slicePlan, options);
        return new Tensor(info.dtype, slicePlan.shape.map(Number), data);
      },
    };
  }

  /** Fetch and gather the bytes a slice plan selects. */
  private readPlan(name: string, plan: SlicePlan, options: GetTensorOptions): Uint8Array {
    if (plan.byteLength === 0) return new Uint8Array(0);
    const source = this.live;
    const base = this.byteRange(name).offset;
    const owned = options.memory === "owned";
    if (source.zeroCopy && !owned) {
      const span = source.read(base + plan.spanStart, plan.spanEnd - plan.spanStart);
      return gather(plan, span, plan.spanStart);
    }
    // Owned slices are read as owned pieces (pread on the Node backends), never gathered from a mapping: a file
    // truncated underneath is then an IoError rather than SIGBUS, and the pieces are the caller's memory already.
    const pieces = fetchRanges(plan).map((range) => ({
      offset: range.start,
      bytes: owned
        ? source.readOwned(base + range.start, range.end - range.start)
        : source.read(base + range.start, range.end - range.start),
    }));
    // A single fetched piece that is exactly the slice needs no gathering copy.
    return pieces.length === 1 ? gather(plan, pieces[0]!.bytes, pieces[0]!.offset) : gatherPieces(plan, pieces);
  }

  close(): void {
    this.source?.close();
    this.source = null;
  }

  [Symbol.dispose](): void {
    this.close();
  }
}
