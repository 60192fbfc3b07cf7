/**
 * In-place edits of a sharded checkpoint (a directory or its `*.index.json`): the handle finds the shard holding
 * each tensor and edits it through that shard's own `EditHandle`, so each shard has its own journal. Node-only.
 *
 * A commit that touched several shards is made atomic with a commit marker: every edited shard is synced (when
 * fsync is on), then `.safetensors-edit-commit` naming this edit's group is written (atomically), then the shards'
 * journals are removed, then the marker. A crash before the marker leaves journals that roll every shard back; a
 * crash after it leaves journals of a committed group, which recovery discards (the edit stays). Each journal
 * records its group, so a marker never decides for journals of another edit.
 */
import { randomBytes } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import type { TensorInfo } from "../format/header.js";
import { ioError } from "../io/node-file.js";
import { openSharded, type ShardedFile } from "../shards/node.js";
import type { SliceIndex } from "../slice/index.js";
import { type RecoverResult, readCommitMarker, recoverFile, removeCommitMarker, writeCommitMarker } from "./journal.js";
import { EditHandle, type EditOptions, type EditResult, type EditValues, type WriteOptions } from "./region.js";

/**
 * In-place edits of a sharded checkpoint (what `openForEdit` returns for a directory or index): each write goes to the
 * shard holding its tensor, each shard journaled; a commit that touched several shards is all or none.
 */
export class ShardedEditHandle {
  /** The checkpoint as given (directory or index). */
  readonly path: string;
  /** The directory its shards are in. */
  readonly directory: string;
  readonly #checkpoint: ShardedFile;
  readonly #options: EditOptions;
  readonly #handles = new Map<string, EditHandle>();
  readonly #group = randomBytes(12).toString("hex");
  #closed = false;

  /** @internal use `openForEdit`. */
  constructor(target: string, options: EditOptions) {
    this.path = target;
    this.#options = options;
    this.#checkpoint = openSharded(target, { ...options, backend: "pread", interruptedEdit: "ignore" });
    this.directory = this.#checkpoint.directory;
  }

  #live(): void {
    if (this.#closed) this.#checkpoint.keys(); // throws Closed
  }

  keys(): string[] {
    return this.#checkpoint.keys();
  }

  info(name: string): TensorInfo {
    return this.#checkpoint.info(name);
  }

  /** The shard file holding tensor `name`. */
  fileOf(name: string): string {
    return path.join(this.directory, this.#checkpoint.shardOf(name));
  }

  get pending(): boolean {
    return [...this.#handles.values()].some((handle) => handle.pending);
  }

  /** @internal The edit handle of the shard holding `name` (opened for editing on first use). */
  handleOf(name: string): EditHandle {
    this.#live();
    const shard = this.#checkpoint.shardOf(name);
    let handle = this.#handles.get(shard);
    if (handle === undefined) {
      handle = new EditHandle(path.join(this.directory, shard), this.#options, this.#group);
      this.#handles.set(shard, handle);
    }
    return handle;
  }

  /** `EditHandle.write` on the shard holding `name`. */
  write(name: string, slice: string | readonly SliceIndex[], values: EditValues, options?: WriteOptions): EditResult {
    return this.handleOf(name).write(name, slice, values, options);
  }

  /** Make every shard's edits final, all or none (see the module comment). */
  commit(): void {
    this.#live();
    const pending = [...this.#handles.values()].filter((handle) => handle.pending);
    if (pending.length <= 1) {
      pending[0]?.commit();
      return;
    }
    for (const handle of pending) handle.syncData();
    writeCommitMarker(this.directory, this.#group, this.#options.fsync ?? false);
    for (const handle of pending) handle.dropJournal();
    // The marker goes last; the group stays the handle's (a marker is only ever left by a crash, and recovery
    // removes it before the next transaction can begin).
    removeCommitMarker(this.directory);
  }

  rollback(): void {
    this.#live();
    for (const handle of this.#handles.values()) handle.rollback();
  }

  /** Close; uncommitted edits are rolled back. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      for (const handle of this.#handles.values()) handle.close();
    } finally {
      this.#checkpoint.close();
    }
  }

  [Symbol.dispose](): void {
    this.close();
  }
}

/** What `recoverCheckpoint` did, per shard. */
export interface CheckpointRecoverResult {
  /** Per shard file that had a journal (its base name). */
  readonly shards: ReadonlyMap<string, RecoverResult>;
}

/**
 * Recover every shard of the checkpoint directory (or the index's directory) that has a journal: rolled back, or,
 * for an edit whose commit marker is in place, kept (its journals discarded). Then the marker is removed.
 */
export function recoverCheckpoint(target: string, options: { fsync?: boolean } = {}): CheckpointRecoverResult {
  let directory = target;
  try {
    if (!fs.statSync(target).isDirectory()) directory = path.dirname(target);
  } catch (error) {
    throw ioError(error, `cannot open ${target}`);
  }
  // Fails (JournalCorrupt) before anything is touched when the marker is damaged.
  readCommitMarker(directory);
  const shards = new Map<string, RecoverResult>();
  for (const entry of fs.readdirSync(directory).sort()) {
    const match = /^\.(.+)-journal$/.exec(entry);
    if (!match || !fs.existsSync(path.join(directory, match[1]!))) continue;
    shards.set(match[1]!, recoverFile(path.join(directory, match[1]!), options));
  }
  removeCommitMarker(directory);
  return { shards };
}
