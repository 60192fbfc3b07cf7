/**
 * The `safetensors` command: finds the command in the registry, parses its options (global ones before or after
 * it), runs it, and turns errors into exit statuses. Exit status: 0 success, 1 invalid input (bad file, missing
 * tensor, I/O error), 2 usage error.
 */
import * as fs from "node:fs";
import { isSafetensorError } from "../format/errors.js";
import { backendOf, parseOptions, splitAtCommand, UsageError } from "./args.js";
import type { Command } from "./command.js";
import { COMMANDS } from "./commands.js";
import { commandHelp, topLevelHelp, usageHint } from "./help.js";
import { type Io, isBrokenPipe, processIo } from "./io.js";
import { didYouMean } from "./suggest.js";

export type { Io } from "./io.js";

function version(): string {
  const pkg = JSON.parse(fs.readFileSync(new URL("../../package.json", import.meta.url), "utf8"));
  return `safetensors-ts ${pkg.version}\n`;
}

/** A word where a command was expected that names a file, a checkpoint or a URL: what the user had in mind. */
function looksLikeInput(word: string): boolean {
  return (
    fs.existsSync(word) || /\.(safetensors|json|gguf|pt|pth|bin|ckpt)$/i.test(word) || /^[a-z0-9]+:\/\//i.test(word)
  );
}

async function load(name: string): Promise<Command> {
  const entry = COMMANDS.find((candidate) => candidate.name === name);
  if (entry === undefined) {
    if (looksLikeInput(name)) {
      const quoted = /^[\w./:@+=-]+$/.test(name) ? name : JSON.stringify(name);
      throw new UsageError(
        `unknown command ${JSON.stringify(name)}: to look inside it, run 'safetensors inspect ${quoted}'`,
      );
    }
    const names = COMMANDS.map((candidate) => candidate.name);
    throw new UsageError(`unknown command ${JSON.stringify(name)}${didYouMean(name, names)}`);
  }
  return (await entry.load()).command;
}

/**
 * The CLI's line for a warning the library emits (`process.emitWarning`, which Node prints as "(node:PID)
 * [CODE] SafetensorsWarning: ... (Use node --trace-warnings ...)"): `warning: ...`, with the command to run.
 */
export function warningLine(warning: string | Error): string {
  const data = (typeof warning === "string" ? {} : warning) as { code?: string; file?: string; journal?: string };
  if (data.code === "SAFETENSORS_INTERRUPTED_EDIT" && data.file !== undefined) {
    const quoted = /^[\w./:@+=-]+$/.test(data.file) ? data.file : JSON.stringify(data.file);
    return (
      `warning: ${data.file} has an undo journal (${data.journal}): an in-place edit is in progress or was ` +
      `interrupted, so the file may hold part of it; run 'safetensors recover ${quoted}' to roll it back\n`
    );
  }
  return `warning: ${typeof warning === "string" ? warning : warning.message}\n`;
}

/**
 * Run `body` with the library's warnings printed as the CLI's own lines on `io`, in order with the command's output
 * (not on a later tick, as Node's listener would), and Node's own printing of them off.
 */
async function withWarnings<T>(io: Io, body: () => Promise<T>): Promise<T> {
  const emit = process.emitWarning;
  process.emitWarning = ((warning: string | Error) => io.stderr(warningLine(warning))) as typeof process.emitWarning;
  try {
    return await body();
  } finally {
    process.emitWarning = emit;
  }
}

export async function main(argv: string[], io: Io = processIo): Promise<number> {
  return withWarnings(io, () => run(argv, io));
}

async function run(argv: string[], io: Io): Promise<number> {
  let current: { name: string; command: Command } | undefined;
  let inputs: string[] = [];
  const print = (text: string) => {
    io.stdout(text);
    return 0;
  };
  try {
    const names = [...COMMANDS.map((entry) => entry.name), "help"];
    const { command: name, before, rest } = splitAtCommand(argv, names);
    const globals = parseOptions(before, {}).values;
    if (name === undefined) {
      if (globals.version) return print(version());
      if (globals.help) return print(topLevelHelp());
      io.stderr(topLevelHelp());
      return 2;
    }
    if (name === "help") {
      const topic = rest.find((word) => !word.startsWith("-"));
      io.stdout(topic === undefined ? topLevelHelp() : commandHelp(await load(topic)));
      return 0;
    }
    const command = await load(name);
    current = { name, command };
    const { values, positionals } = parseOptions(rest, command.options);
    inputs = positionals;
    if (globals.help || values.help) return print(commandHelp(command));
    if (globals.version || values.version) return print(version());
    const backend = backendOf(values.backend ?? globals.backend);
    return await command.run({ values, positionals }, { io, backend });
  } catch (error) {
    if (error instanceof UsageError) {
      const hint = usageHint(current?.name, current?.command);
      io.stderr(`safetensors: ${error.message}\n${hint}`);
      return 2;
    }
    // Output cut short by its reader is what the reader asked for (as ripgrep does): exit 0, say nothing.
    if (isBrokenPipe(error)) return 0;
    if (isSafetensorError(error)) {
      // Loaded here: node-input.ts loads the reader (and the addon), which a command's start-up does not always need.
      const explained = (await import("../read/node-input.js")).explainInputError(error, inputs);
      io.stderr(`error[${explained.code}]: ${explained.message}\n`);
      return 1;
    }
    const code = (error as NodeJS.ErrnoException)?.code;
    if (typeof code === "string") {
      io.stderr(`error[IoError]: ${(error as Error).message}\n`);
      return 1;
    }
    throw error;
  }
}
