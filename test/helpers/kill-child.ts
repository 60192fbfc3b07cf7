/**
 * Crash tests: run a test file again as a child that prints one byte before each write it makes, and SIGKILL it once
 * it has printed `killAt` bytes (the child waits at that write, so the kill lands at an exact, reproducible point).
 */
import { spawn } from "node:child_process";
import { writeSync } from "node:fs";
import { loaderArgs, modulePath } from "./compiled.js";

/**
 * The child's byte to the parent. Its standard output is a non-blocking pipe: with the parent slow to read (the whole
 * suite at load ~7 on 2 cores) a write failed with EAGAIN once, inside the edit being tested, and the child died of
 * that instead of the kill. Retried until the pipe takes it.
 */
export function tellParent(): void {
  for (;;) {
    try {
      writeSync(1, ".");
      return;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EAGAIN") throw error;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1);
    }
  }
}

/**
 * Spawn the module `script` (a source's path: its compiled twin under `npm test`, helpers/compiled.ts) with `env`
 * added; resolves with the child's signal once it has exited.
 */
export async function killAtWrite(
  script: string,
  env: Record<string, string>,
  killAt: number,
): Promise<NodeJS.Signals | null> {
  const child = spawn(process.execPath, [...loaderArgs, modulePath(script)], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "inherit"],
  });
  let seen = 0;
  const exited = new Promise<void>((resolve) => child.on("exit", () => resolve()));
  child.stdout.on("data", (chunk: Buffer) => {
    seen += chunk.length;
    if (seen >= killAt) child.kill("SIGKILL");
  });
  await exited;
  return child.signalCode;
}
