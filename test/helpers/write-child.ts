/**
 * The writing process of the crash and fault tests (run bundled, as plain JS: see crash.test.ts).
 *
 *   write-child OP TARGET SEED     OP: save (saveFile) | save-direct (saveFile, every tensor byte by direct I/O)
 *                                  | stream (the streaming writer, chunks in a shuffled order)
 *                                  | sharded (saveSharded into the directory TARGET, several shards and an index)
 *   write-child shard TARGET SEED IN   the `shard` command, IN into the directory TARGET
 *
 * With WRITE_CHILD_STOP_AT=K it counts the file-system calls of the write (creating, writing, chmod, fsync, close,
 * rename, unlink) and, before the K-th (from 0), prints the byte 0x01 and blocks until the parent sends one byte
 * back, so the parent can SIGKILL it at that exact point. Prints `done CALLS` (CALLS: the calls counted) when the write
 * returned, or `error CODE` (exit 1) when it threw.
 */
import fs from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import { main as cli } from "../../src/cli/main.js";
import { createWriter, isSafetensorError, saveFile, saveSharded } from "../../src/node.js";
import { SHARD_SIZE, writePlan } from "./write-plans.js";

const POINT = 0x01;

const HOOKED = [
  "openSync",
  "writeSync",
  "writevSync",
  "fchmodSync",
  "fsyncSync",
  "closeSync",
  "renameSync",
  "unlinkSync",
] as const;

let calls = 0;

function installStop(stopAt: number): void {
  const original = Object.fromEntries(HOOKED.map((name) => [name, fs[name]])) as Record<string, unknown>;
  const writeSync = fs.writeSync;
  const readSync = fs.readSync;
  const reply = new Uint8Array(1);
  const point = () => {
    if (calls++ !== stopAt) return;
    writeSync(1, new Uint8Array([POINT]));
    if (readSync(0, reply, 0, 1, null) === 0) process.exit(3);
  };
  const patched = fs as unknown as Record<string, unknown>;
  for (const name of HOOKED) {
    const call = original[name] as (...args: unknown[]) => unknown;
    patched[name] = (...args: unknown[]) => {
      // Only our writes: not opens for reading, not the point protocol itself on fds 0 and 1.
      const ours = name === "openSync" ? String(args[1] ?? "r") !== "r" : args[0] !== 0 && args[0] !== 1;
      if (ours) point();
      return call(...args);
    };
  }
  syncBuiltinESMExports();
}

async function main(): Promise<void> {
  const [op, target, seedText, input] = process.argv.slice(2);
  const seed = Number(seedText);
  const stopAt = process.env.WRITE_CHILD_STOP_AT;
  if (stopAt !== undefined) installStop(Number(stopAt));
  if (op === "save" || op === "save-direct") {
    const plan = writePlan(seed, 1500, 600);
    saveFile(target!, plan.tensors, plan.metadata, op === "save-direct" ? { directMinBytes: 0 } : {});
  } else if (op === "stream") {
    const plan = writePlan(seed, 12, 40_000);
    const writer = createWriter(target!, plan.tensors, plan.metadata);
    const chunks: [string, number][] = [];
    for (const [name, tensor] of plan.tensors) {
      for (let at = 0; at < tensor.data.length; at += 8192) chunks.push([name, at]);
    }
    let x = seed | 1;
    for (let i = chunks.length - 1; i > 0; i--) {
      x = (Math.imul(x, 1103515245) + 12345) >>> 0;
      const j = x % (i + 1);
      [chunks[i], chunks[j]] = [chunks[j]!, chunks[i]!];
    }
    for (const [i, [name, at]] of chunks.entries()) {
      const bytes = plan.tensors.get(name)!.data.subarray(at, at + 8192);
      // Every other chunk through the async path, as a one-chunk stream.
      if (i % 2) await writer.writeFrom(name, [bytes], { offset: at, length: bytes.length });
      else writer.write(name, bytes, at);
    }
    writer.commit();
  } else if (op === "sharded") {
    const plan = writePlan(seed, 300, 3000);
    saveSharded(target!, plan.tensors, { maxShardSize: SHARD_SIZE, metadata: plan.metadata });
  } else if (op === "shard") {
    let stderr = "";
    const io = {
      stdout: () => {},
      stderr: (text: string) => {
        stderr += text;
      },
    };
    const status = await cli(["shard", input!, target!, "--max-shard-size", SHARD_SIZE], io);
    if (status !== 0) throw new Error(`shard exited with ${status}: ${stderr}`);
  } else {
    throw new Error(`unknown op ${op}`);
  }
  process.stdout.write(`done ${calls}\n`);
}

main().catch((error) => {
  process.stdout.write(`error ${isSafetensorError(error) ? error.code : String(error)}\n`);
  process.exitCode = 1;
});
