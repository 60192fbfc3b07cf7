/**
 * Directory-level atomicity of a checkpoint save (Node). Each file of a checkpoint is written atomically on its own,
 * but a save that replaced shard by shard could be killed with some shards new and some old: a set that may even
 * pass every index check (same names, dtypes and shapes at two training steps) while mixing two checkpoints.
 *
 * So a save is a small redo log in the directory:
 *
 * 1. every new file (shards, index) is written completely under a staging name `.NAME.safetensors-stage-PID-RANDOM`
 *    next to its final name (invisible to readers, which look for `model*.safetensors` and `*.index.json`);
 * 2. a commit record `.INDEX.safetensors-commit` is written atomically, listing each staged file's final name and the
 *    files of the earlier save to remove. Its appearance is the commit point;
 * 3. the staged files are renamed over their final names (shards first, the index last), the earlier save's other
 *    files removed, and the record deleted.
 *
 * A save killed before step 2 leaves the old checkpoint as it was (its staged files are removed by the next save once
 * their PID is gone). One killed during step 3 is finished ("rolled forward") by whoever comes next: the next save
 * into the directory and every `openSharded`. Replaying is idempotent, so two processes may do it at once.
 *
 * A reader sees a consistent set: `openSharded` rolls a pending record forward first, and retries an open during
 * which a commit started or finished (a record appeared, or the index file was replaced), also one that failed then.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { SafetensorError } from "../format/errors.js";
import { ioError } from "../io/node-file.js";
import { fsyncDirectory, processAlive, writeAllAt, writeError, writeFileAtomic } from "../io/node-write.js";

const STAGE_MARK = ".safetensors-stage-";
const RECORD_SUFFIX = ".safetensors-commit";

interface CommitRecord {
  /** [staged name, final name], in rename order; names are relative to the directory. */
  renames: [string, string][];
  /** Files of the earlier save to remove once the renames are done. */
  remove: string[];
}

/** The commit record of the checkpoint whose index is `indexName`. */
export function recordPath(dir: string, indexName: string): string {
  return path.join(dir, `.${indexName}${RECORD_SUFFIX}`);
}

/** A fresh staging path for the file `name` of `dir`. */
export function stagePath(dir: string, name: string): string {
  const random = Math.random().toString(36).slice(2, 10).padEnd(8, "0");
  return path.join(dir, `.${name}${STAGE_MARK}${process.pid}-${random}`);
}

/** Names of commit records in `dir` (none when it does not exist). */
export function pendingRecords(dir: string): string[] {
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch {
    return [];
  }
  return names.filter((name) => name.startsWith(".") && name.endsWith(RECORD_SUFFIX)).map((n) => path.join(dir, n));
}

/** A plain file name inside the directory: no separator, not `.` or `..`. */
function isPlainName(name: unknown): name is string {
  return typeof name === "string" && name !== "" && name !== "." && name !== ".." && !/[/\\\0]/.test(name);
}

function readRecord(file: string): CommitRecord {
  let parsed: unknown;
  try {
    parsed = JSON.parse(fs.readFileSync(file, "utf8"));
  } catch (error) {
    throw new SafetensorError("InterruptedSave", `cannot read the commit record ${file}: ${String(error)}`, {
      cause: error,
    });
  }
  const record = parsed as Partial<CommitRecord> | null;
  const renames = record?.renames;
  const remove = record?.remove;
  const valid =
    Array.isArray(renames) &&
    renames.every(
      (pair) =>
        Array.isArray(pair) &&
        pair.length === 2 &&
        isPlainName(pair[0]) &&
        pair[0].includes(STAGE_MARK) &&
        isPlainName(pair[1]),
    ) &&
    Array.isArray(remove) &&
    remove.every(isPlainName);
  if (!valid) throw new SafetensorError("InterruptedSave", `${file} is not a commit record of this library`);
  return { renames, remove } as CommitRecord;
}

/**
 * Finish the commit recorded in `record`: rename each staged file over its final name, remove the earlier save's
 * files, then the record. A staged file already gone was renamed by an earlier replay (its final name exists then).
 */
function replay(dir: string, record: string, fsync: boolean): void {
  const { renames, remove } = readRecord(record);
  try {
    for (const [staged, final] of renames) {
      try {
        fs.renameSync(path.join(dir, staged), path.join(dir, final));
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "ENOENT" || !fs.existsSync(path.join(dir, final))) throw error;
      }
    }
    for (const name of remove) {
      try {
        fs.unlinkSync(path.join(dir, name));
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
      }
    }
    if (fsync) fsyncDirectory(dir);
    try {
      fs.unlinkSync(record);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
    }
  } catch (error) {
    const coded = writeError(error, `cannot finish the interrupted save recorded in ${record}`);
    if (coded.code !== "NotWritable") throw coded;
    throw new SafetensorError(
      "InterruptedSave",
      `${dir} holds an interrupted save (${path.basename(record)}) that cannot be finished here (${coded.message}); open it once with write access`,
      { cause: error },
    );
  }
}

/** Roll forward every pending commit in `dir`; returns how many there were. */
export function rollForward(dir: string, fsync = false): number {
  const records = pendingRecords(dir);
  for (const record of records) replay(dir, record, fsync);
  return records.length;
}

/**
 * Remove staged files (and temporary files of staged files) in `dir` whose writer is gone and that no pending commit
 * names. Best effort, as the stale temporary files of single-file writes.
 */
function removeStaleStages(dir: string): void {
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch {
    return;
  }
  const listed = new Set<string>();
  for (const record of pendingRecords(dir)) {
    for (const [staged] of readRecord(record).renames) listed.add(staged);
  }
  for (const name of names) {
    const match = new RegExp(`${STAGE_MARK.replace(/[.-]/g, "\\$&")}(\\d+)-[0-9a-z]+`).exec(name);
    if (!match || listed.has(name)) continue;
    const pid = Number(match[1]);
    if (pid === process.pid || processAlive(pid)) continue;
    try {
      fs.unlinkSync(path.join(dir, name));
    } catch {}
  }
}

export interface StagedSave {
  /** Write one file under a staging name (the callback writes `staged` atomically); returns its final path. */
  stage(name: string, write: (staged: string) => void): string;
  /** `stage` for a file written asynchronously (a merge reading remote inputs). */
  stageAsync(name: string, write: (staged: string) => Promise<void>): Promise<string>;
  /** Commit: record, renames, removals. `remove` are files of the earlier save (plain names in the directory). */
  commit(remove: readonly string[]): void;
  /** Remove every staged file; the directory is left as it was. Idempotent; a no-op after `commit()`. */
  abort(): void;
}

/** Begin a save into `dir` (which exists): earlier interrupted saves are finished and their leftovers removed. */
export function beginStagedSave(dir: string, indexName: string, options: { fsync?: boolean } = {}): StagedSave {
  const fsync = options.fsync === true;
  rollForward(dir, fsync);
  removeStaleStages(dir);
  const renames: [string, string][] = [];
  let state: "open" | "committed" | "aborted" = "open";
  const abort = () => {
    if (state !== "open") return;
    state = "aborted";
    for (const [staged] of renames) {
      try {
        fs.unlinkSync(path.join(dir, staged));
      } catch {}
    }
  };
  return {
    stage(name, write) {
      const staged = stagePath(dir, name);
      try {
        write(staged);
      } catch (error) {
        abort();
        throw error;
      }
      renames.push([path.basename(staged), name]);
      return path.join(dir, name);
    },
    async stageAsync(name, write) {
      const staged = stagePath(dir, name);
      try {
        await write(staged);
      } catch (error) {
        abort();
        throw error;
      }
      renames.push([path.basename(staged), name]);
      return path.join(dir, name);
    },
    commit(remove) {
      const record = recordPath(dir, indexName);
      try {
        const text = new TextEncoder().encode(JSON.stringify({ renames, remove }));
        writeFileAtomic(record, (fd) => writeAllAt(fd, text, 0), { fsync });
      } catch (error) {
        abort();
        throw error;
      }
      state = "committed";
      replay(dir, record, fsync);
    },
    abort,
  };
}

/**
 * What identifies a checkpoint's state for a reader: the commit records present and the index file's identity (every
 * commit of a sharded set replaces the index last). Equal before and after opening every shard: the set is one save's.
 */
export function checkpointStamp(dir: string, indexPath: string | null): string {
  const records = pendingRecords(dir).length;
  if (indexPath === null) return `${records}`;
  try {
    const stat = fs.statSync(indexPath, { bigint: true });
    return `${records}:${stat.dev}:${stat.ino}:${stat.ctimeNs}:${stat.size}`;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return `${records}:absent`;
    throw ioError(error, `cannot open ${indexPath}`);
  }
}
