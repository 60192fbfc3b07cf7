/** `safetensors validate`: every check the reader makes, on each file given. */
import * as fs from "node:fs";
import * as path from "node:path";
import { isSafetensorError, SafetensorError } from "../format/errors.js";
import { hasJournal, journalPathFor } from "../io/node-journal-path.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import { isGgufInput, validateGguf } from "./gguf-input.js";
import { inputHeader } from "./input.js";
import { isRemoteLocation, withRemote } from "./location.js";
import { isShardedTarget, openShardedInput } from "./sharded.js";

function jsonOf(file: string, error: SafetensorError | undefined): string {
  if (!error) return `{"file":${JSON.stringify(file)},"ok":true}`;
  const tensor = error.tensor === undefined ? "" : `,"tensor":${JSON.stringify(error.tensor)}`;
  const shard = error.file === undefined || error.file === file ? "" : `,"file":${JSON.stringify(error.file)}`;
  // NotSafetensors: the code of the header check the bytes failed (what the reference's own check would report).
  const cause = error.code === "NotSafetensors" && isSafetensorError(error.cause) ? error.cause.code : undefined;
  const check = cause === undefined ? "" : `,"headerCheck":"${cause}"`;
  return `{"file":${JSON.stringify(file)},"ok":false,"error":{"code":"${error.code}","message":${JSON.stringify(error.message)}${tensor}${shard}${check}}}`;
}

/** Files of `target` (a file, or a checkpoint's directory / index) that have an undo journal next to them. */
function interruptedFiles(target: string): string[] {
  if (target === "-") return [];
  let directory: string | null = null;
  try {
    const stat = fs.statSync(target);
    if (stat.isDirectory()) directory = target;
    else if (target.endsWith(".index.json")) directory = path.dirname(target);
  } catch {
    return [];
  }
  if (directory === null) return hasJournal(target) ? [target] : [];
  const dir = directory;
  return fs
    .readdirSync(dir)
    .map((entry) => /^\.(.+)-journal$/.exec(entry)?.[1])
    .filter((name): name is string => name !== undefined && fs.existsSync(path.join(dir, name)))
    .sort()
    .map((name) => path.join(dir, name));
}

/** `InterruptedEdit` naming the journals and the command that recovers them. */
function interrupted(target: string, files: readonly string[]): SafetensorError {
  const journals = files.map((file) => journalPathFor(file)).join(", ");
  return new SafetensorError(
    "InterruptedEdit",
    `an in-place edit was interrupted (undo journal ${journals}): the file may hold part of it. ` +
      `Run "safetensors recover ${target}" to roll it back, then validate again`,
  );
}

export const command = defineCommand({
  usage: "validate FILE|URL... [--json]",
  description: `Check each file's header and layout as the reader does ("-" reads standard input). Prints "ok" per valid
file on standard output and "error[CODE]: message" per invalid one on standard error (each prefixed with the file
name when several are given). A file (or a shard) with an undo journal next to it, left by an in-place edit that
was interrupted, is error[InterruptedEdit] with the command that recovers it. A file that is something else altogether (a PyTorch checkpoint, an index, a web
page...) gets error[NotSafetensors] naming what it is.

--json prints {"file","ok"} or {"file","ok":false,"error":{"code","message"[,"tensor"][,"file"][,"headerCheck"]}}
for one FILE, an array of them for several, all on standard output; error.file is the shard at fault in a sharded
checkpoint; "headerCheck", for NotSafetensors, is the code of the header check those bytes fail (what a reader that
does not sniff formats would report).
Exit status 1 when any file is invalid.`,
  options: {
    json: { type: "boolean", help: "print the verdicts as JSON" },
  },
  async run({ values, positionals }, { io, backend }) {
    if (positionals.length === 0) throw new UsageError("validate takes one or more FILEs");
    if (positionals.filter((file) => file === "-").length > 1) {
      throw new UsageError('"-" (standard input) can be read once');
    }
    const several = positionals.length > 1;
    const prefix = (file: string) => (several ? `${file}: ` : "");
    const verdicts: string[] = [];
    let status = 0;
    for (const file of positionals) {
      let failure: SafetensorError | undefined;
      try {
        const journaled = isRemoteLocation(file) ? [] : interruptedFiles(file);
        if (journaled.length > 0) throw interrupted(file, journaled);
        if (isGgufInput(file)) await validateGguf(file);
        else if (isRemoteLocation(file)) await withRemote(file, async () => {});
        else if (isShardedTarget(file)) openShardedInput(file, backend, io).close();
        else inputHeader(file, backend ?? "auto");
      } catch (error) {
        if (!isSafetensorError(error)) throw error;
        failure = error;
        status = 1;
      }
      if (values.json) verdicts.push(jsonOf(file, failure));
      else if (failure) io.stderr(`${prefix(file)}error[${failure.code}]: ${failure.message}\n`);
      else io.stdout(`${prefix(file)}ok\n`);
    }
    if (values.json) io.stdout(several ? `[${verdicts.join(",\n")}]\n` : `${verdicts[0]}\n`);
    return status;
  },
});
