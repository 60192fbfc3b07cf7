/**
 * Every digest of a safetensors file from one read of its bytes, in order (large local files: on worker threads fed
 * from the same reads, `digest-lanes.ts`): the whole file's SHA-256, the SHA-256 of
 * each tensor's bytes (tensors tile the data region in offset order, so each byte goes to exactly one tensor), and the
 * digests other tools identify files by:
 *
 * - A1111 "AutoV2" (Civitai's name): the first 10 hex digits of the whole file's SHA-256.
 * - kohya sd-scripts `sshs_model_hash` (sd-webui-additional-networks' `addnet_hash_safetensors`): SHA-256 of the
 *   bytes from 8 + N to the end of the file, the data region. The header (metadata included) never counts, so
 *   editing metadata keeps it. ModelSpec's `modelspec.hash_sha256` is the same digest written "0x" + hex (the
 *   reference computation in sd-scripts' `sai_model_spec.py` hashes `file.read()` after the header).
 * - A1111 "AutoV1" / kohya `sshs_legacy_hash` (`addnet_hash_legacy`): the first 8 hex digits of the SHA-256 of the
 *   64 KiB at byte 0x100000 of the file (fewer bytes, or none, when the file is shorter).
 *
 * Node-only (node:crypto).
 */
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import { SafetensorError } from "../format/errors.js";
import type { Header } from "../format/header.js";
import { hashLanes } from "./digest-lanes.js";
import { type SegmentDigests, segmentDigests } from "./segments.js";

/** Every digest of a file from one read: the file's SHA-256 and each tensor's. */
export interface FileDigests {
  /** Bytes hashed: the file's length. */
  readonly size: number;
  /** SHA-256 of the whole file (hex). */
  readonly sha256: string;
  /** SHA-256 of each tensor's bytes, in file order. */
  readonly tensors: ReadonlyMap<string, string>;
  /** When asked for (`{ ecosystem: true }`): the digests other tools identify files by. */
  readonly ecosystem?: EcosystemDigests;
}

/** The identifiers other tools print. */
export interface EcosystemDigests {
  /** SHA-256 of the data region, bytes 8 + N to the end. */
  data_sha256: string;
  autov1: string;
  autov2: string;
  sshs_model_hash: string;
  sshs_legacy_hash: string;
  modelspec_hash_sha256: string;
}

export interface DigestOptions {
  /**
   * Also compute the ecosystem's digests. Off by default in the library: the data region's SHA-256 is a third
   * SHA-256 stream over nearly every byte (the whole file's and the tensors' are the other two).
   */
  ecosystem?: boolean;
  /**
   * Local files with at least this many bytes are hashed with the whole file's SHA-256 on this thread and the
   * tensors' (and the data region's) each on a worker thread, all fed from the same reads (default 64 MiB;
   * `Infinity`: never). SHA-256 is the cost (~1 GB/s a stream here; the reads from the page cache are a few
   * percent), so the streams on 2 cores take the time of one or two instead of two or three; a worker costs
   * ~30 ms to start, hence the floor.
   */
  parallelFrom?: number;
}

const LEGACY_START = 0x100000;
const LEGACY_END = LEGACY_START + 0x10000;
const DEFAULT_PARALLEL_FROM = 64 << 20;

/** The byte ranges each digest covers, as `segmentDigests` bounds; `data` only with the ecosystem's digests. */
interface LaneBounds {
  readonly whole: number[];
  readonly legacy: number[] | null;
  readonly data: number[] | null;
  readonly tensors: number[];
}

function laneBounds(header: Header, ecosystem: boolean): LaneBounds {
  const length = header.fileLength;
  const tensors: number[] = [];
  for (const info of header.tensors.values()) {
    tensors.push(header.dataStart + info.dataOffsets[0], header.dataStart + info.dataOffsets[1]);
  }
  return {
    whole: [0, length],
    legacy: ecosystem ? [Math.min(LEGACY_START, length), Math.min(LEGACY_END, length)] : null,
    data: ecosystem ? [header.dataStart, length] : null,
    tensors,
  };
}

/** The digests from each lane's output. */
function assemble(
  header: Header,
  size: number,
  whole: string,
  tensors: readonly string[],
  data?: string,
  legacy?: string,
) {
  const names = [...header.tensors.keys()];
  const byName = new Map(names.map((name, i) => [name, tensors[i]!]));
  const digests = { size, sha256: whole, tensors: byName };
  if (data === undefined || legacy === undefined) return digests;
  const short = legacy.slice(0, 8);
  const ecosystem: EcosystemDigests = {
    data_sha256: data,
    autov1: short,
    autov2: whole.slice(0, 10),
    sshs_model_hash: data,
    sshs_legacy_hash: short,
    modelspec_hash_sha256: `0x${data}`,
  };
  return { ...digests, ecosystem };
}

const sha256 = () => createHash("sha256");

/**
 * Digests of a file whose bytes arrive in order from byte 0 (the size prefix and header first), in chunks of any
 * size, all on this thread. `finish()` checks that exactly the file's length arrived.
 */
export class FileDigester {
  readonly #header: Header;
  readonly #whole: SegmentDigests;
  readonly #legacy: SegmentDigests | null;
  readonly #data: SegmentDigests | null;
  readonly #tensors: SegmentDigests;
  /** Bytes of the file seen so far. */
  #at = 0;

  constructor(header: Header, options: DigestOptions = {}) {
    this.#header = header;
    const bounds = laneBounds(header, options.ecosystem ?? false);
    this.#whole = segmentDigests(sha256, bounds.whole);
    this.#legacy = bounds.legacy && segmentDigests(sha256, bounds.legacy);
    this.#data = bounds.data && segmentDigests(sha256, bounds.data);
    this.#tensors = segmentDigests(sha256, bounds.tensors);
  }

  /** Where the next byte is in the file. */
  get position(): number {
    return this.#at;
  }

  update(bytes: Uint8Array): void {
    const start = this.#at;
    if (start + bytes.length > this.#header.fileLength) {
      throw new SafetensorError("IoError", `more bytes than the file's ${this.#header.fileLength} arrived`);
    }
    this.#whole.update(bytes, start);
    this.#legacy?.update(bytes, start);
    this.#data?.update(bytes, start);
    this.#tensors.update(bytes, start);
    this.#at = start + bytes.length;
  }

  finish(): FileDigests {
    const at = this.#at;
    if (at !== this.#header.fileLength) {
      throw new SafetensorError(
        "IoError",
        `the file ended after ${at} of its ${this.#header.fileLength} bytes (changed while hashing?)`,
      );
    }
    return assemble(
      this.#header,
      at,
      this.#whole.finish(at)[0]!,
      this.#tensors.finish(at),
      this.#data?.finish(at)[0],
      this.#legacy?.finish(at)[0],
    );
  }
}

/** The size prefix of a header of `headerLength` bytes (u64 little-endian). */
export function sizePrefix(headerLength: number): Uint8Array {
  const prefix = new Uint8Array(8);
  new DataView(prefix.buffer).setBigUint64(0, BigInt(headerLength), true);
  return prefix;
}

const CHUNK = 8 << 20;

/** Every byte of the first `size` bytes of an open file, in order, to `sink` (8 MiB reads into one buffer). */
export function readSequentially(fd: number, size: number, label: string, sink: (bytes: Uint8Array) => void): void {
  const chunk = Buffer.allocUnsafe(Math.min(CHUNK, Math.max(size, 1)));
  for (let at = 0; at < size; ) {
    const got = fs.readSync(fd, chunk, 0, Math.min(chunk.length, size - at), at);
    if (got === 0) throw new SafetensorError("IoError", `${label} changed while hashing (unexpected end of file)`);
    sink(chunk.subarray(0, got));
    at += got;
  }
}

/**
 * Hash a local file whose header is known: one sequential read of every byte through `fd`; from
 * `options.parallelFrom` bytes on, the tensors' and the data region's digests on worker threads fed the same reads.
 */
export function digestDescriptor(fd: number, header: Header, label: string, options: DigestOptions = {}): FileDigests {
  const size = header.fileLength;
  if (size < (options.parallelFrom ?? DEFAULT_PARALLEL_FROM)) {
    const digester = new FileDigester(header, options);
    readSequentially(fd, size, label, (bytes) => digester.update(bytes));
    return digester.finish();
  }
  const bounds = laneBounds(header, options.ecosystem ?? false);
  const local = bounds.legacy ? [bounds.whole, bounds.legacy] : [bounds.whole];
  const remote = bounds.data ? [bounds.tensors, bounds.data] : [bounds.tensors];
  const lanes = hashLanes(fd, size, label, local, remote);
  const [whole, legacy] = lanes.local;
  const [tensors, data] = lanes.remote;
  return assemble(header, size, whole![0]!, tensors!, data?.[0], legacy?.[0]);
}

/** SHA-256 (hex) of the first `size` bytes of an open file. */
export function sha256OfDescriptor(fd: number, size: number, label: string): string {
  const hash = createHash("sha256");
  readSequentially(fd, size, label, (bytes) => hash.update(bytes));
  return hash.digest("hex");
}
