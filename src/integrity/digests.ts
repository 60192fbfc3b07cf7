/**
 * Every digest of a safetensors file in one pass over its bytes, in order: the whole file's SHA-256, the SHA-256 of
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
import { createHash, type Hash } from "node:crypto";
import * as fs from "node:fs";
import { SafetensorError } from "../format/errors.js";
import type { Header, TensorInfo } from "../format/header.js";

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
   * Also compute the ecosystem's digests. Off by default: the data region's SHA-256 is a third SHA-256 stream over
   * nearly every byte (whole file and tensor digests are the other two), ~1.5x the hashing time.
   */
  ecosystem?: boolean;
}

const LEGACY_START = 0x100000;
const LEGACY_END = LEGACY_START + 0x10000;

/**
 * Digests of a file whose bytes arrive in order from byte 0 (the size prefix and header first), in chunks of any
 * size. `finish()` checks that exactly the file's length arrived.
 */
export class FileDigester {
  readonly #header: Header;
  readonly #infos: readonly TensorInfo[];
  readonly #whole = createHash("sha256");
  /** The data region's and the legacy window's hashes, when the ecosystem's digests are asked for. */
  readonly #data: Hash | null;
  readonly #legacy: Hash | null;
  readonly #tensors = new Map<string, string>();
  #current = 0;
  #tensor: Hash = createHash("sha256");
  /** Bytes of the file seen so far. */
  #at = 0;

  constructor(header: Header, options: DigestOptions = {}) {
    this.#header = header;
    this.#data = options.ecosystem ? createHash("sha256") : null;
    this.#legacy = options.ecosystem ? createHash("sha256") : null;
    this.#infos = [...header.tensors.values()];
    this.#finishEnded();
  }

  /** Where the next byte is in the file. */
  get position(): number {
    return this.#at;
  }

  update(bytes: Uint8Array): void {
    const start = this.#at;
    const end = start + bytes.length;
    if (end > this.#header.fileLength) {
      throw new SafetensorError("IoError", `more bytes than the file's ${this.#header.fileLength} arrived`);
    }
    this.#whole.update(bytes);
    if (this.#legacy && end > LEGACY_START && start < LEGACY_END) {
      this.#legacy.update(
        bytes.subarray(Math.max(0, LEGACY_START - start), Math.min(bytes.length, LEGACY_END - start)),
      );
    }
    const dataStart = this.#header.dataStart;
    if (end < dataStart) {
      this.#at = end;
      return;
    }
    let i = Math.max(0, dataStart - start);
    if (this.#data && i < bytes.length) this.#data.update(i === 0 ? bytes : bytes.subarray(i));
    this.#at = start + i;
    this.#finishEnded();
    while (i < bytes.length) {
      const info = this.#infos[this.#current]!;
      const take = Math.min(bytes.length - i, dataStart + info.dataOffsets[1] - this.#at);
      this.#tensor.update(bytes.subarray(i, i + take));
      i += take;
      this.#at += take;
      this.#finishEnded();
    }
  }

  /** Tensors whose last byte has arrived (empty ones as soon as their offset is reached) get their digest. */
  #finishEnded(): void {
    const dataAt = this.#at - this.#header.dataStart;
    while (this.#current < this.#infos.length && this.#infos[this.#current]!.dataOffsets[1] <= dataAt) {
      this.#tensors.set(this.#infos[this.#current]!.name, this.#tensor.digest("hex"));
      this.#tensor = createHash("sha256");
      this.#current++;
    }
  }

  finish(): FileDigests {
    if (this.#at !== this.#header.fileLength) {
      throw new SafetensorError(
        "IoError",
        `the file ended after ${this.#at} of its ${this.#header.fileLength} bytes (changed while hashing?)`,
      );
    }
    const sha256 = this.#whole.digest("hex");
    if (!this.#data || !this.#legacy) return { size: this.#at, sha256, tensors: this.#tensors };
    const data = this.#data.digest("hex");
    const legacy = this.#legacy.digest("hex").slice(0, 8);
    const ecosystem: EcosystemDigests = {
      data_sha256: data,
      autov1: legacy,
      autov2: sha256.slice(0, 10),
      sshs_model_hash: data,
      sshs_legacy_hash: legacy,
      modelspec_hash_sha256: `0x${data}`,
    };
    return { size: this.#at, sha256, tensors: this.#tensors, ecosystem };
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

/** Hash a local file whose header is known: one sequential read of every byte through `fd`. */
export function digestDescriptor(fd: number, header: Header, label: string, options: DigestOptions = {}): FileDigests {
  const digester = new FileDigester(header, options);
  readSequentially(fd, header.fileLength, label, (bytes) => digester.update(bytes));
  return digester.finish();
}

/** SHA-256 (hex) of the first `size` bytes of an open file. */
export function sha256OfDescriptor(fd: number, size: number, label: string): string {
  const hash = createHash("sha256");
  readSequentially(fd, size, label, (bytes) => hash.update(bytes));
  return hash.digest("hex");
}
