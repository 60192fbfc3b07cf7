/**
 * A safetensors file opened for byte-level work (diff, patches, manifests): its validated header, the raw header
 * bytes exactly as stored (padding and key order included, which rebuilding a file to the byte needs), and where each
 * tensor's bytes are. Node-only.
 */
import * as fs from "node:fs";
import type { Header } from "../format/header.js";
import { tensorNotFound } from "../format/suggest.js";
import { PreadSource } from "../io/node-file.js";
import { SafetensorsFile } from "../read/file.js";
import type { StoredTensor } from "./compare.js";
import { digestDescriptor, type EcosystemDigests, type FileDigests } from "./digests.js";

export interface StoredFile {
  readonly path: string;
  /** Descriptor the header was read through (all reads use it). */
  readonly fd: number;
  readonly header: Header;
  /** The N header bytes after the 8-byte size prefix, as stored. */
  readonly headerBytes: Uint8Array;
  /** `dev:ino`, to tell whether two paths are one file. */
  readonly identity: string;
  tensor(name: string): StoredTensor;
  close(): void;
}

export function openStoredFile(path: string): StoredFile {
  const source = PreadSource.open(path);
  const file = SafetensorsFile.open(source);
  try {
    const { header } = file;
    const headerBytes = file.readRange(8, header.headerLength);
    const fd = source.descriptor;
    const stat = fs.fstatSync(fd);
    return {
      path,
      fd,
      header,
      headerBytes,
      identity: `${stat.dev}:${stat.ino}`,
      tensor(name) {
        const info = header.tensors.get(name);
        if (!info) throw tensorNotFound(name, header.tensors.keys(), path);
        return {
          dtype: info.dtype,
          shape: info.shape,
          byteLength: info.byteLength,
          fd,
          offset: header.dataStart + info.dataOffsets[0],
        };
      },
      close: () => file.close(),
    };
  } catch (error) {
    file.close();
    throw error;
  }
}

/** Every digest of a local file in one pass (`digests.ts`): the file's, each tensor's and the ecosystem's. */
export function digestFile(path: string): FileDigests & { ecosystem: EcosystemDigests } {
  const file = openStoredFile(path);
  try {
    return digestDescriptor(file.fd, file.header, path, { ecosystem: true }) as FileDigests & {
      ecosystem: EcosystemDigests;
    };
  } finally {
    file.close();
  }
}
