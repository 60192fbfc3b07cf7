/**
 * Atomic file writes: bytes go to a temporary file in the target's directory, which replaces the target by rename
 * only once everything is written. A failure at any point removes the temporary file and leaves the target as it
 * was. The target's permission bits are kept; new files get 0644 (less the umask).
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { SafetensorError } from "../format/errors.js";
import { ioError } from "./node-file.js";

export interface AtomicWriteOptions {
  /** fsync the file before the rename and the directory after it, so the new file survives a power loss. */
  fsync?: boolean;
  /** Permission bits for a new file (default 0o644, less the umask). An existing target keeps its own. */
  mode?: number;
}

/**
 * The path a write should replace: symlinks are followed (also dangling ones), so a link keeps pointing at the new
 * content instead of being replaced by a regular file.
 */
function resolveTarget(target: string): { file: string; existingMode: number | null } {
  let file = path.resolve(target);
  for (let hops = 0; hops < 40; hops++) {
    let stat: fs.Stats;
    try {
      stat = fs.lstatSync(file);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return { file, existingMode: null };
      throw ioError(error, `cannot write ${target}`);
    }
    if (stat.isSymbolicLink()) {
      file = path.resolve(path.dirname(file), fs.readlinkSync(file));
      continue;
    }
    if (!stat.isFile())
      throw new SafetensorError("IoError", `cannot write ${target}: it exists and is not a regular file`);
    return { file, existingMode: stat.mode & 0o7777 };
  }
  throw new SafetensorError("IoError", `cannot write ${target}: too many levels of symbolic links`);
}

/**
 * Write a file atomically. `write(fd)` writes the whole content through the descriptor (positional writes from 0).
 */
export function writeFileAtomic(target: string, write: (fd: number) => void, options: AtomicWriteOptions = {}): void {
  const { file, existingMode } = resolveTarget(target);
  const dir = path.dirname(file);
  const temp = path.join(dir, `.${path.basename(file)}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`);
  let fd: number | null = null;
  try {
    try {
      fd = fs.openSync(temp, "wx", 0o600);
    } catch (error) {
      throw ioError(error, `cannot create a temporary file in ${dir}`);
    }
    write(fd);
    const mode = existingMode ?? (options.mode ?? 0o644) & ~currentUmask();
    fs.fchmodSync(fd, mode);
    if (options.fsync) fs.fsyncSync(fd);
    fs.closeSync(fd);
    fd = null;
    fs.renameSync(temp, file);
    if (options.fsync) fsyncDirectory(dir);
  } catch (error) {
    if (fd !== null) {
      try {
        fs.closeSync(fd);
      } catch {}
    }
    try {
      fs.unlinkSync(temp);
    } catch {}
    throw ioError(error, `cannot write ${target}`);
  }
}

/** Write all of `bytes` at `position`. */
export function writeAllAt(fd: number, bytes: Uint8Array, position: number): void {
  let done = 0;
  while (done < bytes.length) {
    const chunk = Math.min(bytes.length - done, 1 << 30);
    done += fs.writeSync(fd, bytes, done, chunk, position + done);
  }
}

function currentUmask(): number {
  // process.umask() without an argument is deprecated but is the only way to read it without changing it.
  try {
    return process.umask();
  } catch {
    return 0o022;
  }
}

function fsyncDirectory(dir: string): void {
  let fd: number | null = null;
  try {
    fd = fs.openSync(dir, "r");
    fs.fsyncSync(fd);
  } catch {
    // Some platforms and file systems cannot fsync a directory; the file itself was synced.
  } finally {
    if (fd !== null) fs.closeSync(fd);
  }
}
