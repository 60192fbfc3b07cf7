/**
 * One sequential read of a file feeding several SHA-256 "lanes" (each a `segmentDigests` over a list of byte
 * ranges): `local` lanes on this thread, each `remote` lane on a worker thread of its own. The reads land in a ring of
 * shared buffers; a slot is read again only when every worker has hashed it, so memory stays at the ring's size and
 * the workers run at most `SLOTS` chunks behind. Synchronous, like the rest of the hashing (Atomics.wait on this
 * thread, results taken with receiveMessageOnPort), so manifest and patch code keep calling it as a function.
 *
 * The worker runs `segmentDigests`'s own source text (eval), so the same code hashes on every thread and nothing
 * has to be resolved as a file next to a bundled CLI. Node-only.
 */
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import { MessageChannel, type MessagePort, receiveMessageOnPort, Worker } from "node:worker_threads";
import { SafetensorError } from "../format/errors.js";
import { segmentDigests } from "./segments.js";

/** Ring of 4 slots of 4 MiB: 16 MiB shared, the workers free to lag 3 chunks. */
const SLOT_BYTES = 4 << 20;
const SLOTS = 4;
/** How long a worker may take to start before the hashing gives up (it takes ~30 ms). */
const START_TIMEOUT_MS = 60_000;

// Control words (Int32): chunks published, an abort flag, then per worker: started, chunks consumed, done; then the
// byte length of each slot.
const PRODUCED = 0;
const ABORT = 1;
const PER_WORKER = 2;
const started = (w: number) => PER_WORKER + 3 * w;
const consumed = (w: number) => PER_WORKER + 3 * w + 1;
const done = (w: number) => PER_WORKER + 3 * w + 2;
/** Set in a worker's consumed word when it fails, so that this thread never waits for it. */
const GAVE_UP = 0x7fffffff;

function workerSource(workers: number): string {
  const lengths = PER_WORKER + 3 * workers;
  return `"use strict";
const { workerData } = require("node:worker_threads");
const { createHash } = require("node:crypto");
const __name = (f) => f;
const segmentDigests = (${segmentDigests.toString()});
const { ring, control, index, bounds, size, port } = workerData;
const ctl = new Int32Array(control);
const bytes = new Uint8Array(ring);
let result;
Atomics.store(ctl, ${started(0)} + 3 * index, 1);
try {
  const lane = segmentDigests(() => createHash("sha256"), bounds);
  let at = 0;
  for (let k = 0; at < size; k++) {
    while (Atomics.load(ctl, ${PRODUCED}) <= k) {
      if (Atomics.load(ctl, ${ABORT}) !== 0) throw new Error("aborted");
      Atomics.wait(ctl, ${PRODUCED}, k, 1000);
    }
    const slot = k % ${SLOTS};
    const length = Atomics.load(ctl, ${lengths} + slot);
    lane.update(bytes.subarray(slot * ${SLOT_BYTES}, slot * ${SLOT_BYTES} + length), at);
    at += length;
    Atomics.store(ctl, ${consumed(0)} + 3 * index, k + 1);
    Atomics.notify(ctl, ${consumed(0)} + 3 * index);
  }
  result = { digests: lane.finish(at) };
} catch (error) {
  Atomics.store(ctl, ${consumed(0)} + 3 * index, ${GAVE_UP});
  Atomics.notify(ctl, ${consumed(0)} + 3 * index);
  result = { error: String(error && error.stack || error) };
}
port.postMessage(result);
Atomics.store(ctl, ${done(0)} + 3 * index, 1);
Atomics.notify(ctl, ${done(0)} + 3 * index);
`;
}

export interface LaneDigests {
  /** Each lane's digests, in the order the lanes were given. */
  readonly local: string[][];
  readonly remote: string[][];
}

interface Running {
  readonly worker: Worker;
  readonly port: MessagePort;
}

/** Wait until control word `i` reaches `target`; a worker that has not started within the timeout is an error. */
function waitFor(ctl: Int32Array, i: number, target: number, startedWord: number): void {
  let waited = 0;
  for (let value = Atomics.load(ctl, i); value < target; value = Atomics.load(ctl, i)) {
    Atomics.wait(ctl, i, value, 1000);
    waited += 1000;
    if (waited >= START_TIMEOUT_MS && Atomics.load(ctl, startedWord) === 0) {
      throw new SafetensorError("IoError", "a hashing worker thread did not start");
    }
  }
}

function startWorkers(
  remote: readonly ArrayLike<number>[],
  size: number,
  ring: SharedArrayBuffer,
  control: SharedArrayBuffer,
) {
  const source = workerSource(remote.length);
  const running: Running[] = [];
  try {
    remote.forEach((bounds, index) => {
      const { port1, port2 } = new MessageChannel();
      const worker = new Worker(source, {
        eval: true,
        workerData: { ring, control, index, bounds: Float64Array.from(bounds), size, port: port2 },
        transferList: [port2],
        // A worker does not inherit this process's --import hooks (tsx) for an eval'd script: none are needed.
        execArgv: [],
      });
      worker.unref();
      running.push({ worker, port: port1 });
    });
  } catch {
    // No threads to be had (a resource limit): the caller hashes every lane here instead.
    for (const { worker } of running) void worker.terminate();
    return null;
  }
  return running;
}

/**
 * Read the first `size` bytes of `fd` once, in order, and return each lane's digests. Lanes are `segmentDigests`
 * bounds. When no worker thread can be started, every lane is hashed on this thread (same result, more time).
 */
export function hashLanes(
  fd: number,
  size: number,
  label: string,
  local: readonly ArrayLike<number>[],
  remote: readonly ArrayLike<number>[],
): LaneDigests {
  const ring = new SharedArrayBuffer(SLOT_BYTES * SLOTS);
  const control = new SharedArrayBuffer(4 * (PER_WORKER + 3 * remote.length + SLOTS));
  const ctl = new Int32Array(control);
  const lengths = PER_WORKER + 3 * remote.length;
  const running = startWorkers(remote, size, ring, control);
  const here = (running ? local : [...local, ...remote]).map((bounds) =>
    segmentDigests(() => createHash("sha256"), bounds),
  );
  const bytes = new Uint8Array(ring);
  try {
    for (let k = 0, at = 0; at < size; k++) {
      const slot = k % SLOTS;
      if (running && k >= SLOTS) {
        for (let w = 0; w < running.length; w++) waitFor(ctl, consumed(w), k - SLOTS + 1, started(w));
      }
      const view = bytes.subarray(slot * SLOT_BYTES, (slot + 1) * SLOT_BYTES);
      const got = fs.readSync(fd, view, 0, Math.min(SLOT_BYTES, size - at), at);
      if (got === 0) throw new SafetensorError("IoError", `${label} changed while hashing (unexpected end of file)`);
      Atomics.store(ctl, lengths + slot, got);
      Atomics.store(ctl, PRODUCED, k + 1);
      Atomics.notify(ctl, PRODUCED);
      for (const lane of here) lane.update(view.subarray(0, got), at);
      at += got;
    }
  } catch (error) {
    Atomics.store(ctl, ABORT, 1);
    Atomics.notify(ctl, PRODUCED);
    throw error;
  }
  const digests = here.map((lane) => lane.finish(size));
  if (!running) return { local: digests.slice(0, local.length), remote: digests.slice(local.length) };
  const remoteDigests = running.map(({ port }, w) => {
    waitFor(ctl, done(w), 1, started(w));
    const message = receiveMessageOnPort(port)?.message as { digests?: string[]; error?: string } | undefined;
    port.close();
    if (!message?.digests) {
      throw new SafetensorError(
        "IoError",
        `hashing ${label} failed in a worker thread: ${message?.error ?? "no result"}`,
      );
    }
    return message.digests;
  });
  return { local: digests, remote: remoteDigests };
}
