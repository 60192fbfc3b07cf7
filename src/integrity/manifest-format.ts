/**
 * The integrity manifest (`*.manifest.json`):
 *
 * `{"manifest_version":1,"model":NAME,"kind":"file"|"sharded","files":[FILE...]}`, FILE =
 * `{"name","size","sha256","header_sha256","metadata":{KEY:VALUE}|null,"tensors":[{"name","dtype","shape",
 * "data_offsets":[b,e],"sha256"}]}` for a safetensors file (tensors in file order; `header_sha256` over the 8-byte
 * prefix and the header), or `{"name","size","sha256"}` for another file of a checkpoint (its index). Names are
 * relative to the checkpoint's directory (for one file: its own name).
 */
import { SafetensorError } from "../format/errors.js";
import { HEX64, isCount, isRecord } from "./json-checks.js";

export const MANIFEST_VERSION = 1;

/** One tensor of a manifest file: its header entry and the SHA-256 of its bytes. */
export interface ManifestTensor {
  readonly name: string;
  readonly dtype: string;
  readonly shape: readonly number[];
  readonly data_offsets: readonly [number, number];
  readonly sha256: string;
}

/** One file of a manifest. */
export interface ManifestFile {
  readonly name: string;
  readonly size: number;
  readonly sha256: string;
  /** Present for safetensors files. */
  readonly header_sha256?: string;
  readonly metadata?: Readonly<Record<string, string>> | null;
  readonly tensors?: readonly ManifestTensor[];
}

/**
 * An integrity manifest (`createManifest`): every file's size and SHA-256, and for safetensors files the header's
 * SHA-256, the metadata and every tensor's digest.
 */
export interface Manifest {
  readonly manifest_version: number;
  readonly model: string;
  readonly kind: "file" | "sharded";
  readonly files: readonly ManifestFile[];
}

function invalid(message: string): never {
  throw new SafetensorError("ManifestInvalid", `not a valid manifest: ${message}`);
}

function digest(value: unknown, what: string): string {
  if (typeof value !== "string" || !HEX64.test(value)) invalid(`${what} must be 64 lowercase hex digits`);
  return value;
}

function tensor(value: unknown, what: string): ManifestTensor {
  if (!isRecord(value) || typeof value.name !== "string" || typeof value.dtype !== "string") {
    invalid(`${what} needs a name and a dtype`);
  }
  const { shape, data_offsets: offsets } = value;
  if (!Array.isArray(shape) || !shape.every(isCount)) invalid(`${what}.shape must be a list of sizes`);
  if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every(isCount)) {
    invalid(`${what}.data_offsets must be [begin, end]`);
  }
  return {
    name: value.name,
    dtype: value.dtype,
    shape: shape as number[],
    data_offsets: [offsets[0] as number, offsets[1] as number],
    sha256: digest(value.sha256, `${what}.sha256`),
  };
}

function file(value: unknown, what: string): ManifestFile {
  if (!isRecord(value) || typeof value.name !== "string") invalid(`${what} needs a name`);
  if (!isCount(value.size)) invalid(`${what}.size must be a byte count`);
  const base = { name: value.name, size: value.size, sha256: digest(value.sha256, `${what}.sha256`) };
  if (value.tensors === undefined) return base;
  if (!Array.isArray(value.tensors)) invalid(`${what}.tensors must be a list`);
  const metadata = value.metadata ?? null;
  if (metadata !== null && (!isRecord(metadata) || !Object.values(metadata).every((v) => typeof v === "string"))) {
    invalid(`${what}.metadata must map strings to strings`);
  }
  return {
    ...base,
    header_sha256: digest(value.header_sha256, `${what}.header_sha256`),
    metadata: metadata as Record<string, string> | null,
    tensors: value.tensors.map((t, i) => tensor(t, `${what}.tensors[${i}]`)),
  };
}

/** Check a parsed manifest (from its file, or from a verified signature). */
export function parseManifest(value: unknown): Manifest {
  if (!isRecord(value)) invalid("it must be a JSON object");
  if (value.manifest_version !== MANIFEST_VERSION) {
    invalid(`manifest_version ${String(value.manifest_version)} is not supported (${MANIFEST_VERSION} is)`);
  }
  if (typeof value.model !== "string") invalid("model must be a string");
  if (value.kind !== "file" && value.kind !== "sharded") invalid('kind must be "file" or "sharded"');
  if (!Array.isArray(value.files) || value.files.length === 0) invalid("files must be a non-empty list");
  const files = value.files.map((f, i) => file(f, `files[${i}]`));
  const names = new Set(files.map((f) => f.name));
  if (names.size !== files.length) invalid("a file is listed twice");
  return { manifest_version: MANIFEST_VERSION, model: value.model, kind: value.kind, files };
}
