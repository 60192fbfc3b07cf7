/**
 * The files on one side of a patch: one safetensors file, or every file of a sharded checkpoint (its shards, opened
 * for byte-level work, and its index, opened raw), each with its name in the checkpoint's directory. The checkpoint
 * is checked as every sharded reader checks it (`openCheckpoint`). Node-only.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { identity, openCheckpoint } from "../edit/checkpoint.js";
import { quoteName, SafetensorError } from "../format/errors.js";
import { ioError, openForReading } from "../io/node-file.js";
import { checkShardPath } from "../shards/index-json.js";
import { isShardedTarget } from "../shards/node.js";
import { sha256OfDescriptor } from "./digests.js";
import { openStoredFile, type StoredFile } from "./stored-file.js";

export interface SideFile {
  /** The name in the checkpoint's directory (a plain file name). */
  readonly name: string;
  readonly path: string;
  readonly fd: number;
  readonly size: number;
  /** `dev:ino`. */
  readonly identity: string;
  /** The opened safetensors file; null for the index (raw bytes). */
  readonly stored: StoredFile | null;
}

export interface PatchSide {
  readonly sharded: boolean;
  /** Where the files are. */
  readonly directory: string;
  /** Shards in the index's order, then the index; or the one file. */
  readonly files: readonly SideFile[];
  close(): void;
}

/** A name a patch may give a file of a sharded checkpoint: a plain name (the directory commit renames plain names). */
export function checkPatchFileName(name: string): void {
  checkShardPath(name);
  if (name.includes("/")) {
    throw new SafetensorError("UnsafePath", `${quoteName(name)}: patches of checkpoints take plain file names only`);
  }
}

function openRaw(file: string, name: string): SideFile {
  const fd = openForReading(file);
  try {
    const stat = fs.fstatSync(fd);
    if (!stat.isFile()) throw new SafetensorError("IoError", `${file} is not a regular file`);
    return { name, path: file, fd, size: stat.size, identity: identity(stat), stored: null };
  } catch (error) {
    fs.closeSync(fd);
    throw ioError(error, `cannot read ${file}`);
  }
}

function openSafetensors(file: string, name: string): SideFile {
  const stored = openStoredFile(file);
  return {
    name,
    path: file,
    fd: stored.fd,
    size: stored.header.fileLength,
    identity: stored.identity,
    stored,
  };
}

/** Open one side: a safetensors file, a checkpoint directory or its index file. */
export function openPatchSide(target: string): PatchSide {
  const files: SideFile[] = [];
  const close = () => {
    for (const file of files) {
      if (file.stored) file.stored.close();
      else fs.closeSync(file.fd);
    }
  };
  try {
    if (!isShardedTarget(target)) {
      files.push(openSafetensors(target, path.basename(target)));
      return { sharded: false, directory: path.dirname(target), files, close };
    }
    const checkpoint = openCheckpoint(target);
    const { directory, indexName } = checkpoint;
    const names = checkpoint.files.map((file) => file.name);
    checkpoint.close();
    for (const name of names) {
      checkPatchFileName(name);
      files.push(openSafetensors(path.join(directory, name), name));
    }
    if (indexName !== null) files.push(openRaw(path.join(directory, indexName), indexName));
    return { sharded: true, directory, files, close };
  } catch (error) {
    close();
    throw error;
  }
}

/** SHA-256 of a raw side file (the index). */
export function sha256OfSideFile(file: SideFile): string {
  return sha256OfDescriptor(file.fd, file.size, file.path);
}
