/**
 * Chunk I/O of worker threads (Node): a chunk read whole from a descriptor the process shares (descriptors are the
 * process's, every thread may use them), and a chunk written at its place in an output file through a descriptor of
 * the caller's own, around the page cache where it can be. The GGUF converter's and the merge's workers read, compute
 * and write their own chunks with these, so the main thread touches none of the bytes and two workers read and write
 * in parallel.
 */
import * as fs from "node:fs";
import { SafetensorError } from "../format/errors.js";
import { writeDirect } from "./node-copy.js";

/** Fill `into` from byte `position` of `fd` (a short file is `SourceChanged`: its header promised more). */
export function readFullyAt(fd: number, into: Uint8Array, position: number): void {
  for (let got = 0; got < into.length; ) {
    const n = fs.readSync(fd, into, got, into.length - got, position + got);
    if (n === 0) throw endedAt(position + got);
    got += n;
  }
}

/** `readFullyAt` on libuv's threads, this one free meanwhile. */
export async function readFullyAtAsync(fd: number, into: Uint8Array, position: number): Promise<void> {
  for (let got = 0; got < into.length; ) {
    const n = await new Promise<number>((resolve, reject) =>
      fs.read(fd, into, got, into.length - got, position + got, (error, bytes) =>
        error ? reject(error) : resolve(bytes),
      ),
    );
    if (n === 0) throw endedAt(position + got);
    got += n;
  }
}

function endedAt(position: number): SafetensorError {
  return new SafetensorError("SourceChanged", `the input ends at byte ${position}, before its header's end`);
}

/**
 * Write `bytes` at `position` of the file at `path`, which must already be at least that long (sized before the
 * writers start: writes past the end from two threads would serialize, and extend the file under each other).
 * Direct writes (O_DIRECT, around the page cache) where possible. Measured on the 2-core VM, to-gguf --type q8_0 of
 * the 2.37 GiB checkpoint writes 1.26 GiB: through the page cache 1.4-2.8 s of system time (every fresh page-cache
 * page a host fault, native/direct_write.c), direct 0.2 s. The descriptor is opened for the call: writeDirect sets
 * O_DIRECT on its open file for the call, and on a descriptor shared with another worker that made the other's
 * buffered write of an unaligned chunk fail with EINVAL (tried). Large writes go the way that cost less lately
 * (writeDirect's `adaptive`): on the host of 2026-12-03 the page cache was the faster one (`cp` of 2.37 GiB 1.35-1.53
 * s, `dd oflag=direct` 5.5-6.9 s).
 */
export function writeAtPath(path: string, bytes: Uint8Array, position: number): void {
  const fd = fs.openSync(path, "r+");
  try {
    if (writeDirect(fd, [bytes], position, true)) return;
    for (let done = 0; done < bytes.length; ) {
      done += fs.writeSync(fd, bytes, done, bytes.length - done, position + done);
    }
  } finally {
    fs.closeSync(fd);
  }
}
