/**
 * Crash and fault tests of the writers.
 *
 * Crashes: a child process (test/helpers/write-child.ts, bundled to plain JS once so each child starts in tens of
 * milliseconds) writes a file with `saveFile` or the streaming writer, or a checkpoint directory with `saveSharded` or
 * the `shard` command (the directory as a whole must be the old checkpoint or the new one, see
 * src/shards/save-commit.ts), and stops before each of its file-system calls
 * until the parent answers; the parent SIGKILLs it at a point chosen by the seed, either while it waits there or just
 * after letting it go on (the kill then lands inside the next call). Whatever the point, the target must be absent
 * or its old bytes, or the complete new file; and the next write to the same target must leave no temporary file.
 *
 * Faults: a file size limit (RLIMIT_FSIZE via prlimit: EFBIG), a full file system (a small tmpfs, root only) and a
 * read-only directory give `DiskFull` / `NotWritable` and leave the directory as it was, also when saveFile writes
 * with direct I/O.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import { build } from "esbuild";
import { main as cli } from "../src/cli/main.js";
import {
  createWriter,
  isSafetensorError,
  openFile,
  openSharded,
  type SafetensorErrorCode,
  saveFile,
  saveSharded,
  serialize,
} from "../src/node.js";
import { repoRoot } from "./helpers/corpus.js";
import { SHARD_SIZE, writePlan } from "./helpers/write-plans.js";

const POINT = 0x01;
const TEMP = ".safetensors-tmp-";

let root = "";
let child = "";

/**
 * /dev/shm when it is a writable tmpfs: a SIGKILL leaves the kernel's view of the files intact on any file system, so
 * the trials need no disk, and on a busy machine the disk's writeback throttling made them ten times slower.
 */
function memoryBacked(): string | null {
  try {
    fs.accessSync("/dev/shm", fs.constants.W_OK);
    return fs.statSync("/dev/shm").isDirectory() ? "/dev/shm" : null;
  } catch {
    return null;
  }
}

before(async () => {
  root = fs.mkdtempSync(path.join(memoryBacked() ?? os.tmpdir(), "st-crash-"));
  // The bundle sits two levels below `root`, next to a link to build/: the addon loaders find build/Release there.
  fs.symlinkSync(path.join(repoRoot, "build"), path.join(root, "build"));
  child = path.join(root, "bin", "child", "write-child.mjs");
  await build({
    entryPoints: [path.join(repoRoot, "test/helpers/write-child.ts")],
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    outfile: child,
    logLevel: "silent",
  });
});

after(() => {
  fs.rmSync(root, { recursive: true, force: true });
});

type Op = "save" | "save-direct" | "stream";

function planOf(op: Op, seed: number) {
  return op === "stream" ? writePlan(seed, 12, 40_000) : writePlan(seed, 1500, 600);
}

const temps = (dir: string) => fs.readdirSync(dir).filter((name) => name.includes(TEMP));

interface Outcome {
  killed: boolean;
  /** What the target held afterwards ("mixed": a checkpoint directory with some files old, some new). */
  target: "absent" | "old" | "new" | "mixed";
  tempLeft: boolean;
}

/**
 * Run the child on `op`, SIGKILLing it before its `killAt`-th file-system call: while it waits there, or
 * (`killAfterGo`) right after letting it go on, so that the kill lands inside that call or soon after.
 */
async function runChild(
  op: Op | ShardedOp,
  target: string,
  seed: number,
  killAt: number,
  killAfterGo: boolean,
  extra: string[] = [],
) {
  const proc = spawn(process.execPath, [child, op, target, String(seed), ...extra], {
    env: { ...process.env, WRITE_CHILD_STOP_AT: String(killAt) },
    stdio: ["pipe", "pipe", "pipe"],
  });
  proc.stdin.on("error", () => {}); // the child may be gone when we answer
  let stdout = "";
  let stderr = "";
  proc.stderr.on("data", (data: Buffer) => {
    stderr += data;
  });
  proc.stdout.on("data", (data: Buffer) => {
    for (const byte of data) {
      if (byte !== POINT) {
        stdout += String.fromCharCode(byte);
        continue;
      }
      // The child waits before its killAt-th call.
      if (killAfterGo) proc.stdin.write("c");
      proc.kill("SIGKILL");
    }
  });
  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve) =>
    proc.on("exit", (c, s) => resolve([c, s])),
  );
  return { killed: signal === "SIGKILL", code, stdout, stderr };
}

/** One crash trial: returns what it saw after checking the invariants. */
async function trial(op: Op, seed: number): Promise<Outcome> {
  const dir = fs.mkdtempSync(path.join(root, `${op}-${seed}-`));
  const target = path.join(dir, "model.safetensors");
  const plan = planOf(op, seed);
  const expected = serialize(plan.tensors, plan.metadata);
  const old = seed % 3 === 0 ? null : serialize(planOf(op, seed + 1_000_000).tensors, { old: "yes" });
  if (old) fs.writeFileSync(target, old);
  // saveFile stops at ~6 points (create, 2 vectored writes, chmod, close, rename); the streaming writer at ~40.
  const killAt = op === "stream" ? (seed * 7) % 44 : (seed * 5) % 8;

  const { killed, code, stdout, stderr } = await runChild(op, target, seed, killAt, seed % 2 === 1);
  if (!killed) assert.equal(code, 0, `child failed: ${stdout} ${stderr}`);

  let seen: Outcome["target"] = "absent";
  if (fs.existsSync(target)) {
    const bytes = new Uint8Array(fs.readFileSync(target));
    if (old && Buffer.compare(bytes, old) === 0) seen = "old";
    else {
      assert.deepEqual(bytes, expected, `seed ${seed}: the target is neither the old file nor the complete new one`);
      using file = openFile(target, { backend: "pread" });
      assert.equal(file.keys().length, plan.tensors.size);
      seen = "new";
    }
  }
  if (seen === "absent") assert.equal(old, null, `seed ${seed}: the old file disappeared`);
  if (!killed) assert.equal(seen, "new", `seed ${seed}: the child finished but the target is ${seen}`);
  const tempLeft = temps(dir).length > 0;
  if (!killed) assert.equal(tempLeft, false);

  // The next write to the same target cleans what the killed writer left.
  saveFile(target, plan.tensors, plan.metadata);
  assert.deepEqual(temps(dir), [], `seed ${seed}: a temporary file survived the next write`);
  fs.rmSync(dir, { recursive: true, force: true });
  return { killed, target: seen, tempLeft };
}

/** Names a save leaves only while it runs (or when killed): temporary and staged files, commit records. */
const isTransient = (name: string) =>
  name.includes(TEMP) || name.includes(".safetensors-stage-") || name.endsWith(".safetensors-commit");

/** The files of a directory (not transient ones) and their bytes. */
function snapshot(dir: string): Map<string, Buffer> {
  const files = new Map<string, Buffer>();
  if (!fs.existsSync(dir)) return files;
  for (const name of fs.readdirSync(dir).sort()) {
    if (!isTransient(name)) files.set(name, fs.readFileSync(path.join(dir, name)));
  }
  return files;
}

function sameFiles(a: ReadonlyMap<string, Buffer>, b: ReadonlyMap<string, Buffer>): boolean {
  return a.size === b.size && [...a].every(([name, bytes]) => b.get(name)?.equals(bytes) === true);
}

type ShardedOp = "sharded" | "shard";

/** Shards of `plan` written into `into` by saveSharded, or by the `shard` command from `input` (the plan's file). */
async function saveCheckpoint(op: ShardedOp, into: string, plan: ReturnType<typeof writePlan>, input: string) {
  if (op === "sharded") {
    saveSharded(into, plan.tensors, { maxShardSize: SHARD_SIZE, metadata: plan.metadata });
    return;
  }
  fs.writeFileSync(input, serialize(plan.tensors, plan.metadata));
  const { status, stderr } = await shardCommand(input, into);
  assert.equal(status, 0, stderr);
}

let shardCallCount: Promise<number> | undefined;

/** How many counted calls the `shard` command makes on a plan like the trials' (the first trial's input). */
function shardCalls(input: string, dir: string): Promise<number> {
  shardCallCount ??= (async () => {
    const { stdout, code } = await runChild("shard", path.join(dir, "count"), 0, 1e9, false, [input]);
    const calls = /done (\d+)/.exec(stdout)?.[1];
    assert.ok(code === 0 && calls !== undefined, `the shard child did not finish: ${stdout}`);
    fs.rmSync(path.join(dir, "count"), { recursive: true, force: true });
    return Number(calls);
  })();
  return shardCallCount;
}

/** The `shard` command in this process: its exit status and what it wrote to stderr. */
async function shardCommand(input: string, into: string): Promise<{ status: number; stderr: string }> {
  let stderr = "";
  const io = {
    stdout: () => {},
    stderr: (text: string) => {
      stderr += text;
    },
  };
  const status = await cli(["shard", input, into, "--max-shard-size", SHARD_SIZE], io);
  return { status, stderr };
}

/**
 * A crash trial of saveSharded or of the `shard` command over a checkpoint directory (holding an older checkpoint of
 * another shard count, for two seeds in three). The directory as a whole must be the old checkpoint or the new one:
 * as it is found (a reader that knows nothing of commit records sees one of them unless the kill came after the
 * commit point) and as `openSharded` opens it (which finishes a committed save first).
 */
async function shardedTrial(op: ShardedOp, seed: number): Promise<ShardedOutcome> {
  const dir = fs.mkdtempSync(path.join(root, `${op}-${seed}-`));
  const target = path.join(dir, "checkpoint");
  const input = path.join(dir, "in.safetensors");
  const plan = writePlan(seed, 300, 3000);
  await saveCheckpoint(op, path.join(dir, "expected"), plan, path.join(dir, "expected-in.safetensors"));
  const expected = snapshot(path.join(dir, "expected"));
  assert.ok(expected.size >= 4, `only ${expected.size} files: the plan should make several shards`);
  let old = new Map<string, Buffer>();
  if (seed % 3 !== 0) {
    await saveCheckpoint(op, target, writePlan(seed + 1_000_000, 150 + (seed % 5) * 60, 3000), input);
    old = snapshot(target);
  }
  if (op === "shard") fs.writeFileSync(input, serialize(plan.tensors, plan.metadata));
  // Spread over every call of a whole write and an eighth past it (those trials complete): saveSharded makes ~43
  // calls, the shard command as many with the copy addon (copy_file_range is not a counted call), ~340 without it.
  const calls = op === "shard" ? await shardCalls(input, dir) : 43;
  const killAt = Math.floor((((seed * 11) % 46) / 46) * (calls * 1.125 + 1));
  const { killed, code, stdout, stderr } = await runChild(op, target, seed, killAt, seed % 2 === 1, [input]);
  if (!killed) assert.equal(code, 0, `child failed: ${stdout} ${stderr}`);
  const pending = fs.existsSync(target) && fs.readdirSync(target).some((name) => name.endsWith(".safetensors-commit"));
  const state = (files: Map<string, Buffer>): Outcome["target"] =>
    files.size === 0 ? "absent" : sameFiles(files, expected) ? "new" : sameFiles(files, old) ? "old" : "mixed";
  if (!pending) {
    assert.notEqual(state(snapshot(target)), "mixed", `seed ${seed}: old and new files mixed, and no commit record`);
  }
  let seen = state(snapshot(target));
  if (seen !== "absent" || pending) {
    // openSharded finishes a committed save, then reads one consistent set.
    using opened = openSharded(target);
    seen = state(snapshot(target));
    assert.ok(seen === "old" || seen === "new", `seed ${seed}: after openSharded the directory is ${seen}`);
    const tensors = seen === "new" ? plan.tensors : null;
    if (tensors) for (const [name, t] of tensors) assert.deepEqual(opened.getTensor(name).data, t.data);
    if (pending) assert.equal(seen, "new", `seed ${seed}: a committed save was not finished`);
  }
  if (seen === "absent") assert.equal(old.size, 0, `seed ${seed}: the old checkpoint disappeared`);
  if (!killed) assert.equal(seen, "new", `seed ${seed}: the child finished but the directory is ${seen}`);
  const leftovers = fs.existsSync(target) ? fs.readdirSync(target).filter(isTransient) : [];
  await saveCheckpoint(op, target, plan, input);
  assert.deepEqual(fs.readdirSync(target).filter(isTransient), [], `seed ${seed}: a leftover survived the next save`);
  assert.ok(sameFiles(snapshot(target), expected));
  fs.rmSync(dir, { recursive: true, force: true });
  return { killed, target: seen, tempLeft: leftovers.length > 0, pending };
}

interface ShardedOutcome extends Outcome {
  /** Killed after the commit point: a commit record was left for the next reader or writer to finish. */
  pending: boolean;
}

async function trials(op: Op | ShardedOp, seeds: number[], parallel = 4): Promise<(Outcome & { pending?: boolean })[]> {
  const outcomes: (Outcome & { pending?: boolean })[] = [];
  const one = (seed: number) => (op === "sharded" || op === "shard" ? shardedTrial(op, seed) : trial(op, seed));
  for (let i = 0; i < seeds.length; i += parallel) {
    outcomes.push(...(await Promise.all(seeds.slice(i, i + parallel).map(one))));
  }
  return outcomes;
}

/** Per writer: 5 x 18 = 90 trials (each a process start, ~0.1 s of CPU). */
const TRIALS = 18;

describe("SIGKILL at random points", () => {
  const label = {
    save: "saveFile: every file is old/absent or complete",
    "save-direct": "saveFile writing every tensor with direct I/O: every file is old/absent or complete",
    stream: "streaming writer: every file is old/absent or complete",
    sharded: "saveSharded: the directory is the old checkpoint or the new one, never a mix",
    shard: "the shard command: the directory is the old checkpoint or the new one, never a mix",
  };
  for (const op of ["save", "save-direct", "stream", "sharded", "shard"] as const) {
    test(`${TRIALS} kills, ${label[op]}`, async () => {
      const seeds = Array.from({ length: TRIALS }, (_, i) => i + 1);
      const outcomes = await trials(op, seeds);
      const killedBeforeRename = outcomes.filter((o) => o.killed && o.target !== "new");
      // The test must really interrupt writes: many trials die mid-write, leaving a temporary file behind.
      assert.ok(killedBeforeRename.length >= TRIALS / 3, `only ${killedBeforeRename.length} trials died mid-write`);
      assert.ok(
        killedBeforeRename.some((o) => o.tempLeft),
        "no trial left a temporary file: were the kills too late?",
      );
      assert.ok(
        outcomes.some((o) => o.target === "new"),
        "no trial completed",
      );
      if (op === "sharded" || op === "shard") {
        // Some kills must land between the commit point and the end of the renames, where openSharded finishes.
        assert.ok(
          outcomes.some((o) => o.pending),
          "no trial was killed after its commit point",
        );
      }
    });
  }
});

// ---------------------------------------------------------------------------------------------------------------
// Faults

function codeOf(fn: () => unknown): SafetensorErrorCode | "none" {
  try {
    fn();
    return "none";
  } catch (error) {
    assert.ok(isSafetensorError(error), `not a SafetensorError: ${error}`);
    return error.code;
  }
}

const isRoot = process.getuid?.() === 0;

/** saveFile and the streaming writer both refuse `target` with NotWritable. */
function refusesWrites(target: string, plan: ReturnType<typeof planOf>): void {
  assert.equal(
    codeOf(() => saveFile(target, plan.tensors, plan.metadata)),
    "NotWritable",
  );
  assert.equal(
    codeOf(() => createWriter(target, plan.tensors, plan.metadata)),
    "NotWritable",
  );
}

/** Mount a tmpfs of `size` at a new directory (root only); null with the reason when that is not possible here. */
function mountTmpfs(size: string): { dir: string; unmount: () => void } | string {
  if (process.platform !== "linux") return "tmpfs mounts need Linux";
  if (!isRoot) return "mounting a small tmpfs needs root";
  const dir = fs.mkdtempSync(path.join(root, "tmpfs-"));
  const mounted = spawnSync("mount", ["-t", "tmpfs", "-o", `size=${size},mode=0755`, "tmpfs", dir], {
    encoding: "utf8",
  });
  if (mounted.status !== 0) return `cannot mount a tmpfs here: ${(mounted.stderr || String(mounted.error)).trim()}`;
  return {
    dir,
    unmount: () => {
      spawnSync("umount", [dir]);
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

describe("faults", () => {
  test("a file size limit (RLIMIT_FSIZE, EFBIG) is DiskFull and leaves nothing behind", (t) => {
    const prlimit = spawnSync("prlimit", ["--version"]);
    if (prlimit.error) return t.skip("prlimit (util-linux) is not installed");
    for (const op of ["save", "save-direct", "stream"] as const) {
      const dir = fs.mkdtempSync(path.join(root, `fsize-${op}-`));
      const target = path.join(dir, "model.safetensors");
      fs.writeFileSync(target, "old");
      // Both plans are several hundred KB; the limit lets the header and some tensors through.
      const run = spawnSync("prlimit", ["--fsize=65536", process.execPath, child, op, target, "5"], {
        encoding: "utf8",
      });
      assert.equal(run.stdout.trim(), "error DiskFull", `${op}: ${run.stdout} ${run.stderr}`);
      assert.equal(run.status, 1);
      assert.deepEqual(fs.readdirSync(dir), ["model.safetensors"]);
      assert.equal(fs.readFileSync(target, "utf8"), "old");
    }
  });

  test("a full file system (ENOSPC on a small tmpfs) is DiskFull and leaves nothing behind", (t) => {
    const tmpfs = mountTmpfs("256k");
    if (typeof tmpfs === "string") return t.skip(tmpfs);
    try {
      const target = path.join(tmpfs.dir, "model.safetensors");
      fs.writeFileSync(target, "old");
      const plan = planOf("save", 3);
      for (const directMinBytes of [undefined, 0]) {
        assert.equal(
          codeOf(() => saveFile(target, plan.tensors, plan.metadata, { directMinBytes })),
          "DiskFull",
        );
        assert.deepEqual(fs.readdirSync(tmpfs.dir), ["model.safetensors"]);
      }
      const writer = createWriter(target, plan.tensors, plan.metadata);
      const code = codeOf(() => {
        for (const [name, tensor] of plan.tensors) writer.write(name, tensor.data);
      });
      assert.equal(code, "DiskFull");
      assert.equal(writer.state, "aborted");
      assert.deepEqual(fs.readdirSync(tmpfs.dir), ["model.safetensors"]);
      assert.equal(fs.readFileSync(target, "utf8"), "old");
    } finally {
      tmpfs.unmount();
    }
  });

  test("a read-only directory is NotWritable and leaves the old file", (t) => {
    const plan = planOf("save", 4);
    let dir: string;
    let restore: () => void;
    if (isRoot) {
      // Root ignores permission bits: use a file system mounted read-only instead.
      const tmpfs = mountTmpfs("1m");
      if (typeof tmpfs === "string") return t.skip(`root, and ${tmpfs}`);
      dir = tmpfs.dir;
      fs.writeFileSync(path.join(dir, "model.safetensors"), "old");
      const ro = spawnSync("mount", ["-o", "remount,ro", dir], { encoding: "utf8" });
      if (ro.status !== 0) {
        tmpfs.unmount();
        return t.skip(`cannot remount read-only: ${ro.stderr.trim()}`);
      }
      restore = tmpfs.unmount;
    } else {
      dir = fs.mkdtempSync(path.join(root, "ro-"));
      fs.writeFileSync(path.join(dir, "model.safetensors"), "old");
      fs.chmodSync(dir, 0o555);
      restore = () => fs.chmodSync(dir, 0o755);
    }
    try {
      const target = path.join(dir, "model.safetensors");
      refusesWrites(target, plan);
      assert.equal(
        codeOf(() => saveFile(path.join(dir, "new.safetensors"), plan.tensors)),
        "NotWritable",
      );
      assert.equal(
        codeOf(() => saveSharded(path.join(dir, "checkpoint"), plan.tensors, { maxShardSize: SHARD_SIZE })),
        "NotWritable",
      );
      assert.deepEqual(fs.readdirSync(dir), ["model.safetensors"]);
      assert.equal(fs.readFileSync(target, "utf8"), "old");
    } finally {
      restore();
    }
  });

  test("an immutable directory (chattr +i) is NotWritable for every writer and stays as it was", async (t) => {
    const chattr = spawnSync("chattr", ["--help"]);
    if (chattr.error) return t.skip("chattr (e2fsprogs) is not installed");
    const dir = fs.mkdtempSync(path.join(root, "immutable-"));
    const checkpoint = path.join(dir, "checkpoint");
    const old = writePlan(5, 40, 3000);
    saveSharded(checkpoint, old.tensors, { maxShardSize: SHARD_SIZE });
    fs.writeFileSync(path.join(dir, "model.safetensors"), "old");
    const before = new Map([dir, checkpoint].map((d) => [d, fs.readdirSync(d).sort()]));
    const locked = [dir, checkpoint].map((d) => spawnSync("chattr", ["+i", d], { encoding: "utf8" }));
    const failed = locked.find((run) => run.status !== 0);
    if (failed) {
      for (const d of [dir, checkpoint]) spawnSync("chattr", ["-i", d]);
      return t.skip(`chattr +i is not possible here: ${failed.stderr.trim()}`);
    }
    try {
      const plan = planOf("save", 6);
      const target = path.join(dir, "model.safetensors");
      refusesWrites(target, plan);
      // Over the old checkpoint, and into a new directory the immutable one would have to hold.
      for (const into of [checkpoint, path.join(dir, "new-checkpoint")]) {
        assert.equal(
          codeOf(() => saveSharded(into, plan.tensors, { maxShardSize: SHARD_SIZE })),
          "NotWritable",
        );
      }
      const input = path.join(root, "immutable-input.safetensors");
      fs.writeFileSync(input, serialize(plan.tensors, plan.metadata));
      const { status, stderr } = await shardCommand(input, checkpoint);
      assert.notEqual(status, 0);
      assert.match(stderr, /NotWritable/);
      for (const [d, names] of before) assert.deepEqual(fs.readdirSync(d).sort(), names);
      assert.equal(fs.readFileSync(target, "utf8"), "old");
    } finally {
      for (const d of [dir, checkpoint]) spawnSync("chattr", ["-i", d]);
    }
    using opened = openSharded(checkpoint);
    for (const [name, tensor] of old.tensors) assert.deepEqual(opened.getTensor(name).data, tensor.data);
  });
});
