/** Where a command's output goes: the process's streams, or strings in tests. */
import * as fs from "node:fs";

export interface Io {
  stdout: (text: string) => void;
  stderr: (text: string) => void;
}

export const processIo: Io = {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
};

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
