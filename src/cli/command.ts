/** What a command file exports: its help text, its options and what it runs. Registered in `commands.ts`. */
import type { Backend } from "../read/node-files.js";
import type { OptionSpecs, OptionValues } from "./args.js";
import type { Io } from "./io.js";

export interface Context {
  io: Io;
  /** `--backend` as given (before or after the command); undefined when not given. */
  backend: Backend | undefined;
}

export interface Command<O extends OptionSpecs = OptionSpecs> {
  /** The synopsis after `safetensors `, e.g. `inspect FILE [--json] [--verbose]`; more lines for more forms. */
  usage: string;
  /** Paragraphs shown by `--help` after the synopsis: what it does, output format, syntax of values. */
  description: string;
  options: O;
  /** Exit status: 0 ok, 1 invalid input. Usage mistakes throw `UsageError` (exit 2). */
  run(args: { values: OptionValues<O>; positionals: string[] }, context: Context): number | Promise<number>;
}

/** Keeps the option types flowing into `run` while the registry sees every command alike. */
export function defineCommand<const O extends OptionSpecs>(command: Command<O>): Command {
  return command as unknown as Command;
}
