/**
 * What every file handle answers from its header alone (sync and async readers alike): names, metadata, tensor
 * infos and byte ranges; and the source it reads from, until closed.
 */
import { CompactTensors } from "../format/compact-tensors.js";
import { SafetensorError } from "../format/errors.js";
import type { Header, TensorInfo } from "../format/header.js";
import { compareCodePoints } from "../format/serialize.js";
import { tensorNotFound } from "../format/suggest.js";
import { parseSliceSpec, planSlice, type SliceIndex, type SlicePlan } from "../slice/index.js";

export class HeaderView<S extends { readonly kind: string }> {
  readonly header: Header;
  protected source: S | null;
  private sortedKeys: string[] | null = null;

  protected constructor(source: S, header: Header) {
    this.source = source;
    this.header = header;
  }

  /** Which byte source serves reads: "mmap", "pread", "memory", "file", "blob", "http". */
  get backend(): string {
    return this.live.kind;
  }

  protected get live(): S {
    if (!this.source) throw new SafetensorError("Closed", "file is closed");
    return this.source;
  }

  get closed(): boolean {
    return this.source === null;
  }

  /** Tensor names sorted by code point (like the reference's `keys()`). */
  keys(): string[] {
    this.sortedKeys ??= [...this.header.tensors.keys()].sort(compareCodePoints);
    return [...this.sortedKeys];
  }

  /** Tensor names in file-offset order. */
  offsetKeys(): string[] {
    const tensors = this.header.tensors;
    // A copy of a scanned header's names array: spreading its iterator made a result object per name, run before V8
    // has optimized anything in touch_all's window.
    return tensors instanceof CompactTensors ? tensors.names() : [...tensors.keys()];
  }

  metadata(): ReadonlyMap<string, string> | null {
    return this.header.metadata;
  }

  has(name: string): boolean {
    return this.header.tensors.has(name);
  }

  info(name: string): TensorInfo {
    const info = this.header.tensors.get(name);
    if (!info) throw tensorNotFound(name, this.header.tensors.keys());
    return info;
  }

  /** Absolute file offset and length of a tensor's bytes. */
  byteRange(name: string): { offset: number; length: number } {
    const info = this.info(name);
    return { offset: this.header.dataStart + info.dataOffsets[0], length: info.byteLength };
  }

  /** The read plan of a numpy basic index (or its string form) of tensor `name`: shape, byte runs, span. */
  slicePlan(name: string, index: string | readonly SliceIndex[]): SlicePlan {
    const info = this.info(name);
    return planSlice(
      info.dtype,
      info.exactShape ?? info.shape,
      typeof index === "string" ? parseSliceSpec(index) : index,
    );
  }
}
