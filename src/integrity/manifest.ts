/**
 * Integrity manifests (format: manifest-format.ts): `createManifest(FILE|DIR)` records every file's size and SHA-256
 * and, for safetensors files, the header's digest, the metadata and every tensor's dtype, shape, offsets and SHA-256
 * (one pass per file). `verifyManifest` rehashes each file (one pass; a file whose digest matches is done) and, for a
 * file that changed, names what changed: which tensors (changed, missing, added, retyped, moved), which metadata
 * keys, whether the header did. Node-only.
 */
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { isSafetensorError, SafetensorError } from "../format/errors.js";
import { openForReading } from "../io/node-file.js";
import { checkShardPath } from "../shards/index-json.js";
import { isShardedTarget, openSharded } from "../shards/node.js";
import { diffMetadata, type MetadataDiff } from "./diff.js";
import { digestDescriptor, type FileDigests, sha256OfDescriptor, sizePrefix } from "./digests.js";
import { MANIFEST_VERSION, type Manifest, type ManifestFile } from "./manifest-format.js";
import { openStoredFile, type StoredFile } from "./stored-file.js";

/** A safetensors file hashed in one pass: every digest, and the header's (prefix and header bytes). */
function hashed<T>(file: string, use: (stored: StoredFile, digests: FileDigests, headerSha256: string) => T): T {
  const stored = openStoredFile(file);
  try {
    const digests = digestDescriptor(stored.fd, stored.header, file);
    const headerSha256 = createHash("sha256")
      .update(sizePrefix(stored.header.headerLength))
      .update(stored.headerBytes)
      .digest("hex");
    return use(stored, digests, headerSha256);
  } finally {
    stored.close();
  }
}

function safetensorsEntry(file: string, name: string): ManifestFile {
  return hashed(file, ({ header }, digests, headerSha256) => {
    return {
      name,
      size: digests.size,
      sha256: digests.sha256,
      header_sha256: headerSha256,
      metadata: header.metadata ? Object.fromEntries(header.metadata) : null,
      tensors: [...header.tensors.values()].map((info) => ({
        name: info.name,
        dtype: info.dtype,
        shape: info.shape,
        data_offsets: info.dataOffsets,
        sha256: digests.tensors.get(info.name)!,
      })),
    };
  });
}

/** Size and SHA-256 of any file, or the error that kept it from being read. */
function plainDigest(file: string): { size: number; sha256: string } {
  const fd = openForReading(file);
  try {
    const size = fs.fstatSync(fd).size;
    return { size, sha256: sha256OfDescriptor(fd, size, file) };
  } finally {
    fs.closeSync(fd);
  }
}

/** The files of a checkpoint: [path, name relative to its directory, is safetensors]. */
function checkpointFiles(target: string): {
  model: string;
  kind: Manifest["kind"];
  files: [string, string, boolean][];
} {
  if (!isShardedTarget(target)) {
    return { model: path.basename(target), kind: "file", files: [[target, path.basename(target), true]] };
  }
  using sharded = openSharded(target, { backend: "pread" });
  const files: [string, string, boolean][] = [];
  if (sharded.indexPath) files.push([sharded.indexPath, path.basename(sharded.indexPath), false]);
  for (const shard of sharded.shards) files.push([path.join(sharded.directory, shard), shard, true]);
  return { model: path.basename(path.resolve(sharded.directory)), kind: "sharded", files };
}

/** The manifest of a file, or of a sharded checkpoint (directory or index): its index and every shard. */
export function createManifest(target: string): Manifest {
  const { model, kind, files } = checkpointFiles(target);
  return {
    manifest_version: MANIFEST_VERSION,
    model,
    kind,
    files: files.map(([file, name, isSafetensors]) =>
      isSafetensors ? safetensorsEntry(file, name) : { name, ...plainDigest(file) },
    ),
  };
}

/** How a tensor differs from the manifest: other bytes, gone, new, another dtype or shape, or other offsets. */
export type TensorCheckStatus = "changed" | "missing" | "added" | "retyped" | "moved";

/** A tensor that differs from the manifest. */
export interface TensorCheck {
  readonly name: string;
  readonly status: TensorCheckStatus;
}

/** One file checked against a manifest. */
export interface FileCheck {
  readonly name: string;
  readonly path: string;
  /** ok: same bytes. changed: other bytes (see the details). missing, unreadable. extra: in the checkpoint only. */
  readonly status: "ok" | "changed" | "missing" | "unreadable" | "extra";
  readonly error?: { readonly code: string; readonly message: string };
  readonly size?: { readonly expected: number; readonly actual: number };
  readonly headerChanged?: boolean;
  readonly metadata?: readonly MetadataDiff[];
  readonly tensors?: readonly TensorCheck[];
}

/** What `verifyManifest` found: `ok` when every file matches. */
export interface VerifyReport {
  readonly ok: boolean;
  readonly files: readonly FileCheck[];
}

function errorOf(error: unknown): { code: string; message: string } {
  if (isSafetensorError(error)) return { code: error.code, message: error.message };
  throw error;
}

/** What changed in a safetensors file against its manifest entry. */
function changesOf(file: string, entry: ManifestFile): Partial<FileCheck> {
  return hashed(file, ({ header }, digests, headerSha256) => {
    const expected = new Map((entry.tensors ?? []).map((t) => [t.name, t]));
    const tensors: TensorCheck[] = [];
    for (const t of entry.tensors ?? []) {
      const info = header.tensors.get(t.name);
      if (!info) tensors.push({ name: t.name, status: "missing" });
      else if (info.dtype !== t.dtype || info.shape.join() !== t.shape.join()) {
        tensors.push({ name: t.name, status: "retyped" });
      } else if (digests.tensors.get(t.name) !== t.sha256) tensors.push({ name: t.name, status: "changed" });
      else if (info.dataOffsets.join() !== t.data_offsets.join()) tensors.push({ name: t.name, status: "moved" });
    }
    for (const name of header.tensors.keys()) if (!expected.has(name)) tensors.push({ name, status: "added" });
    const before = entry.metadata ? new Map(Object.entries(entry.metadata)) : null;
    return {
      headerChanged: headerSha256 !== entry.header_sha256,
      metadata: diffMetadata(before, header.metadata),
      tensors,
    };
  });
}

function checkFile(file: string, entry: ManifestFile): FileCheck {
  const base = { name: entry.name, path: file };
  let actual: { size: number; sha256: string };
  try {
    actual = plainDigest(file);
  } catch (error) {
    const missing = (error as { cause?: NodeJS.ErrnoException }).cause?.code === "ENOENT";
    return { ...base, status: missing ? "missing" : "unreadable", error: errorOf(error) };
  }
  if (actual.size === entry.size && actual.sha256 === entry.sha256) return { ...base, status: "ok" };
  const size = { expected: entry.size, actual: actual.size };
  if (!entry.tensors) return { ...base, status: "changed", size };
  try {
    return { ...base, status: "changed", size, ...changesOf(file, entry) };
  } catch (error) {
    return { ...base, status: "changed", size, error: errorOf(error) };
  }
}

/**
 * Check FILE (for a manifest of one file: its name may differ) or a checkpoint (directory or index) against a
 * manifest. Every listed file is checked; for a sharded checkpoint, shards its index lists that the manifest does
 * not are reported as `extra`.
 */
export function verifyManifest(target: string, manifest: Manifest): VerifyReport {
  let checks: FileCheck[];
  if (manifest.kind === "file") {
    checks = [checkFile(target, manifest.files[0]!)];
  } else {
    const dir = fs.statSync(target, { throwIfNoEntry: false })?.isDirectory() ? target : path.dirname(target);
    checks = manifest.files.map((entry) => {
      checkShardPath(entry.name);
      return checkFile(path.join(dir, entry.name), entry);
    });
    const listed = new Set(manifest.files.map((f) => f.name));
    try {
      for (const [file, name] of checkpointFiles(target).files) {
        if (!listed.has(name)) checks.push({ name, path: file, status: "extra" });
      }
    } catch {
      // An index that no longer opens is reported through its own entry (changed or missing).
    }
  }
  return { ok: checks.every((check) => check.status === "ok"), files: checks };
}

/** The files a signed statement lists, with the paths it left out (see `verifySignedStatement`). */
export interface SignedFiles {
  readonly resources: readonly { readonly name: string; readonly digest: string }[];
  readonly ignorePaths: readonly string[];
}

/** Whether `name` (relative, POSIX) is one of `ignored` or lies under one of them. */
function isIgnored(name: string, ignored: readonly string[]): boolean {
  return ignored.some((p) => {
    const prefix = p.replace(/^\.\/+/, "").replace(/\/+$/, "");
    return prefix !== "" && (name === prefix || name.startsWith(`${prefix}/`));
  });
}

/** Every regular file under `dir` as a relative POSIX path (symbolic links reported apart), ignored paths left out. */
function modelFiles(dir: string, ignored: readonly string[]): { files: string[]; links: string[] } {
  const files: string[] = [];
  const links: string[] = [];
  const walk = (relative: string) => {
    for (const entry of fs.readdirSync(path.join(dir, relative), { withFileTypes: true })) {
      const name = relative === "" ? entry.name : `${relative}/${entry.name}`;
      if (isIgnored(name, ignored)) continue;
      if (entry.isSymbolicLink()) links.push(name);
      else if (entry.isDirectory()) walk(name);
      else if (entry.isFile()) files.push(name);
    }
  };
  walk("");
  return { files, links };
}

function checkSignedFile(file: string, name: string, digest: string): FileCheck {
  try {
    return { name, path: file, status: plainDigest(file).sha256 === digest ? "ok" : "changed" };
  } catch (error) {
    const missing = (error as { cause?: NodeJS.ErrnoException }).cause?.code === "ENOENT";
    return { name, path: file, status: missing ? "missing" : "unreadable", error: errorOf(error) };
  }
}

/**
 * Check a model against the files a verified signature lists (a statement without our manifest: one OpenSSF model
 * signing wrote, whose serialization hashes whole files): FILE against a one-file statement (its name may differ),
 * or every file of directory DIR, recursively, except the paths it ignored at signing and `options.ignore`
 * (relative to DIR: the signature itself, when it is inside): each listed file ok, changed, missing or unreadable,
 * every other file extra, as model signing's own verifier refuses a model with files it did not sign; symbolic
 * links are unreadable (the statement was made without following them).
 */
export function verifySignedFiles(
  target: string,
  signed: SignedFiles,
  options: { readonly ignore?: readonly string[] } = {},
): VerifyReport {
  let checks: FileCheck[];
  if (!fs.statSync(target, { throwIfNoEntry: false })?.isDirectory()) {
    if (signed.resources.length !== 1) {
      throw new SafetensorError(
        "ManifestInvalid",
        `the signature covers ${signed.resources.length} files: give the model's directory, not one file`,
      );
    }
    checks = [checkSignedFile(target, signed.resources[0]!.name, signed.resources[0]!.digest)];
  } else {
    const ignored = [...signed.ignorePaths, ...(options.ignore ?? [])];
    const { files, links } = modelFiles(target, ignored);
    const linked = new Set(links);
    const link = (name: string): FileCheck => ({
      name,
      path: path.join(target, name),
      status: "unreadable",
      error: { code: "UnsafePath", message: "a symbolic link (the signature was made without following links)" },
    });
    checks = signed.resources.map(({ name, digest }) => {
      checkShardPath(name);
      return linked.has(name) ? link(name) : checkSignedFile(path.join(target, name), name, digest);
    });
    const listed = new Set(signed.resources.map((r) => r.name));
    for (const name of files)
      if (!listed.has(name)) checks.push({ name, path: path.join(target, name), status: "extra" });
    for (const name of links) if (!listed.has(name)) checks.push(link(name));
  }
  return { ok: checks.every((check) => check.status === "ok"), files: checks };
}
