/** Where a command's output goes: the process's streams, or strings in tests. */
import * as fs from "node:fs";

export interface Io {
  stdout: (text: string) => void;
  stderr: (text: string) => void;
}

/**
 * Standard output is written with synchronous writes to fd 1, not `process.stdout`: a reader that goes away
 * (`| head`) then fails the write at once with EPIPE, which `main` turns into a quiet exit, instead of an
 * unhandled 'error' event on the stream after the command has already run to the end.
 */
export const processIo: Io = {
  stdout: (text) => writeBytesToStdout(Buffer.from(text, "utf8")),
  stderr: (text) => process.stderr.write(text),
};

/** The reader of our standard output has gone (`safetensors inspect big | head -1`). */
export function isBrokenPipe(error: unknown): boolean {
  return (error as NodeJS.ErrnoException | undefined)?.code === "EPIPE";
}

/** Raw bytes to standard output (fd 1), synchronously, whatever kind of file or pipe it is. */
export function writeBytesToStdout(bytes: Uint8Array): void {
  for (let done = 0; done < bytes.length; ) {
    try {
      done += fs.writeSync(1, bytes, done, Math.min(bytes.length - done, 1 << 20));
    } catch (error) {
      // A non-blocking pipe that is full: wait for the reader.
      if ((error as NodeJS.ErrnoException).code !== "EAGAIN") throw error;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 5);
    }
  }
}
