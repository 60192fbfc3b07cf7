/**
 * Atomic file writes: bytes go to a temporary file in the target's directory, which replaces the target by rename
 * only once everything is written. A failure at any point removes the temporary file and leaves the target as it
 * was. The target's permission bits are kept; new files get 0644 (less the umask).
 *
 * Temporary files are named `.NAME.safetensors-tmp-PID-RANDOM`. A process killed mid-write (SIGKILL, power loss)
 * cannot remove its own: the next write to the same target removes those whose PID is no longer running.
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

const TEMP_MARK = ".safetensors-tmp-";

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
      throw writeError(error, `cannot write ${target}`);
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

/** errno names that mean "no room": a full disk, a quota, or the process's file size limit (RLIMIT_FSIZE). */
const NO_SPACE = new Set(["ENOSPC", "EDQUOT", "EFBIG"]);
/**
 * errno names that mean the directory (or file system) does not let us write: permissions, a read-only mount, an
 * immutable or append-only directory (`chattr +i` / `+a`: EPERM, also for root).
 */
const NOT_WRITABLE = new Set(["EACCES", "EROFS", "EPERM"]);

/** `ioError`, with the write failures a caller can act on given their own codes (`DiskFull`, `NotWritable`). */
export function writeError(error: unknown, what: string): SafetensorError {
  if (error instanceof SafetensorError) return error;
  const errno = (error as NodeJS.ErrnoException)?.code;
  if (typeof errno === "string" && (NO_SPACE.has(errno) || NOT_WRITABLE.has(errno))) {
    const code = NO_SPACE.has(errno) ? "DiskFull" : "NotWritable";
    return new SafetensorError(code, `${what}: ${errno}: ${(error as Error).message}`, { cause: error });
  }
  return ioError(error, what);
}

/** Temporary files of this process that are not committed or aborted yet: removed if the process exits first. */
const live = new Set<AtomicFile>();
let exitHookInstalled = false;

function track(file: AtomicFile): void {
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    // Runs on a normal exit and on an uncaught exception, not on signals: those are what stale cleaning is for.
    process.once("exit", () => {
      for (const pending of live) pending.abort();
    });
  }
  live.add(file);
}

/**
 * A file being written atomically: `fd` is the temporary file (write it with positional writes); `commit()` puts it
 * in place of the target, `abort()` (or any failure of `commit()`) removes it. Exactly one of them takes effect.
 */
export class AtomicFile {
  /** The temporary file's descriptor, open for writing. */
  readonly fd: number;
  /** The target as given. */
  readonly target: string;
  /** The file the rename replaces (the target with its symlinks followed). */
  readonly file: string;
  /** The temporary file's path. */
  readonly temp: string;
  readonly #mode: number;
  readonly #fsync: boolean;
  #state: "open" | "committed" | "aborted" = "open";

  private constructor(target: string, file: string, temp: string, fd: number, mode: number, fsync: boolean) {
    this.target = target;
    this.file = file;
    this.temp = temp;
    this.fd = fd;
    this.#mode = mode;
    this.#fsync = fsync;
    track(this);
  }

  /** Creates the temporary file next to the (resolved) target, after removing stale ones of dead writers. */
  static create(target: string, options: AtomicWriteOptions = {}): AtomicFile {
    const { file, existingMode } = resolveTarget(target);
    const dir = path.dirname(file);
    removeStaleTemps(file);
    const random = Math.random().toString(36).slice(2, 10).padEnd(8, "0");
    const temp = path.join(dir, `${tempPrefix(file)}${process.pid}-${random}`);
    let fd: number;
    try {
      fd = fs.openSync(temp, "wx", 0o600);
    } catch (error) {
      throw writeError(error, `cannot create a temporary file in ${dir}`);
    }
    const mode = existingMode ?? (options.mode ?? 0o644) & ~currentUmask();
    return new AtomicFile(target, file, temp, fd, mode, options.fsync === true);
  }

  get state(): "open" | "committed" | "aborted" {
    return this.#state;
  }

  /** Set the mode, optionally fsync, close and rename over the target. On failure the temporary file is removed. */
  commit(): void {
    if (this.#state !== "open")
      throw new SafetensorError("Closed", `the write of ${this.target} is already ${this.#state}`);
    try {
      fs.fchmodSync(this.fd, this.#mode);
      if (this.#fsync) fs.fsyncSync(this.fd);
      this.#close();
      fs.renameSync(this.temp, this.file);
      this.#state = "committed";
      live.delete(this);
    } catch (error) {
      this.abort();
      throw writeError(error, `cannot write ${this.target}`);
    }
    if (this.#fsync) fsyncDirectory(path.dirname(this.file));
  }

  /** Close and remove the temporary file; the target is untouched. Idempotent; a no-op after `commit()`. */
  abort(): void {
    if (this.#state !== "open") return;
    this.#state = "aborted";
    live.delete(this);
    this.#close();
    try {
      fs.unlinkSync(this.temp);
    } catch {}
  }

  [Symbol.dispose](): void {
    this.abort();
  }

  #closed = false;
  #close(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      fs.closeSync(this.fd);
    } catch (error) {
      if (this.#state === "open") throw error;
    }
  }
}

/**
 * Write a file atomically. `write(fd)` writes the whole content through the descriptor (positional writes from 0).
 */
export function writeFileAtomic(target: string, write: (fd: number) => void, options: AtomicWriteOptions = {}): void {
  const file = AtomicFile.create(target, options);
  try {
    write(file.fd);
  } catch (error) {
    file.abort();
    throw writeError(error, `cannot write ${target}`);
  }
  file.commit();
}

/**
 * `.NAME.safetensors-tmp-`, with NAME cut to 200 UTF-8 bytes so that the whole temporary name stays within the usual
 * 255-byte limit of a file name (a target with a 250-byte name can still be written).
 */
function tempPrefix(file: string): string {
  const chars = [...path.basename(file)];
  while (Buffer.byteLength(chars.join("")) > 200) chars.pop();
  return `.${chars.join("")}${TEMP_MARK}`;
}

/** Whether a process with this id exists (EPERM: it exists but belongs to someone else). */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * Remove `.NAME.safetensors-tmp-PID-*` files next to `file` whose writer is gone. Never this process's own (another
 * worker thread may be writing), never one whose PID runs. Best effort: a failure here never fails the write.
 */
function removeStaleTemps(file: string): void {
  const dir = path.dirname(file);
  const prefix = tempPrefix(file);
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch {
    return;
  }
  for (const name of names) {
    if (!name.startsWith(prefix)) continue;
    const match = /^(\d+)-[0-9a-z]+$/.exec(name.slice(prefix.length));
    if (!match) continue;
    const pid = Number(match[1]);
    if (pid === process.pid || processAlive(pid)) continue;
    try {
      fs.unlinkSync(path.join(dir, name));
    } catch {}
  }
}

/** Largest single write: Linux transfers at most 0x7ffff000 bytes per call. */
const MAX_WRITE_CHUNK = 1 << 30;
/** POSIX guarantees at least 16 buffers per writev; Linux and macOS take 1024 (IOV_MAX). */
const MAX_IOVECS = 1024;

/** Write all of `bytes` at `position`. */
export function writeAllAt(fd: number, bytes: Uint8Array, position: number): void {
  let done = 0;
  while (done < bytes.length) {
    const chunk = Math.min(bytes.length - done, MAX_WRITE_CHUNK);
    done += fs.writeSync(fd, bytes, done, chunk, position + done);
  }
}

/**
 * Write `buffers` back to back from `position` with vectored positional writes: many small tensors go out in one
 * system call (up to 1024 buffers or 1 GiB per call), large ones in 1 GiB pieces. Short writes are continued.
 */
export function writeBuffersAt(fd: number, buffers: readonly Uint8Array[], position: number): void {
  const batch: Uint8Array[] = [];
  let batchBytes = 0;
  const flush = () => {
    let written = fs.writevSync(fd, batch, position);
    position += written;
    // A short write (a signal, a file size limit): continue from the first byte not written.
    let i = 0;
    while (i < batch.length && written >= batch[i]!.length) written -= batch[i++]!.length;
    if (i < batch.length) {
      writeAllAt(fd, batch[i]!.subarray(written), position);
      position += batch[i]!.length - written;
      for (i++; i < batch.length; i++) {
        writeAllAt(fd, batch[i]!, position);
        position += batch[i]!.length;
      }
    }
    batch.length = 0;
    batchBytes = 0;
  };
  for (const buffer of buffers) {
    for (let at = 0; at < buffer.length; ) {
      const take = Math.min(buffer.length - at, MAX_WRITE_CHUNK - batchBytes);
      batch.push(buffer.subarray(at, at + take));
      batchBytes += take;
      at += take;
      if (batch.length === MAX_IOVECS || batchBytes === MAX_WRITE_CHUNK) flush();
    }
  }
  if (batch.length > 0) flush();
}

function currentUmask(): number {
  // process.umask() without an argument is deprecated but is the only way to read it without changing it.
  try {
    return process.umask();
  } catch {
    return 0o022;
  }
}

/** fsync a directory (best effort: some platforms and file systems cannot). */
export function fsyncDirectory(dir: string): void {
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
