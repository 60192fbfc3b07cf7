/**
 * `openForEdit`: a file or a sharded checkpoint opened for in-place edits, after rolling back what an interrupted
 * edit left. Here, above both handles (region.ts for a file, sharded-edit.ts for a checkpoint, which edits each
 * shard through region.ts), so that neither imports the other's module back.
 */
import * as fs from "node:fs";
import { type OpenedFile, openWithHead } from "../io/node-file.js";
import { hasJournal } from "../io/node-journal-path.js";
import { isShardedTarget } from "../shards/node.js";
import { recoverFile } from "./journal.js";
import { EditHandle, type EditOptions, type Editor } from "./region.js";
import { recoverCheckpoint, ShardedEditHandle } from "./sharded-edit.js";

/**
 * Open a safetensors file, or a sharded checkpoint (its directory or `*.index.json`), for in-place edits. A journal
 * left by an interrupted edit is rolled back first (or refused with `JournalCorrupt` when it does not check out:
 * nothing is then touched); the header (every shard's, and the index) is validated.
 */
export function openForEdit(path: string, options: EditOptions = {}): Editor {
  // Only a directory or an index can be a checkpoint: a file is opened at once (the open also tells whether its
  // journal exists), a directory is told by its failed open, so the first edit of a process stats nothing.
  let opened: OpenedFile | undefined;
  if (!path.endsWith(".index.json")) {
    try {
      opened = openWithHead(path, true);
    } catch (error) {
      if (!fs.existsSync(`${path}/`)) throw error;
    }
  }
  if (opened === undefined && isShardedTarget(path)) {
    recoverCheckpoint(path, { fsync: options.fsync ?? false });
    return new ShardedEditHandle(path, options);
  }
  if (opened && !(opened.journal ?? hasJournal(path))) return new EditHandle(path, options, "", opened);
  if (opened) fs.closeSync(opened.fd);
  recoverFile(path, { fsync: options.fsync ?? false });
  return new EditHandle(path, options);
}
