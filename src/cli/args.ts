/**
 * Argument parsing shared by every command: declared options (which also make `--help`), global options accepted
 * before or after the command, and short usage errors with a did-you-mean.
 */
import { parseArgs } from "node:util";
import type { Backend } from "../read/node-files.js";
import { didYouMean } from "./suggest.js";

/** A mistake in how the command was called: exit status 2 with a short message and the command's usage line. */
export class UsageError extends Error {}

export interface OptionSpec {
  type: "string" | "boolean";
  short?: string;
  multiple?: boolean;
  /** The value's placeholder in help text, e.g. `PATH`. */
  value?: string;
  /** One line for `--help`. */
  help: string;
}

export type OptionSpecs = Readonly<Record<string, OptionSpec>>;

export type OptionValues<O extends OptionSpecs> = {
  [K in keyof O]?: O[K]["type"] extends "string" ? (O[K]["multiple"] extends true ? string[] : string) : boolean;
};

/** Options every command accepts, before or after its name. */
export const GLOBAL_OPTIONS = {
  backend: { type: "string", value: "auto|mmap|pread", help: "how files are read (default auto)" },
  help: { type: "boolean", short: "h", help: "show help (safetensors COMMAND --help for one command)" },
  version: { type: "boolean", short: "V", help: "print the version" },
} as const satisfies OptionSpecs;

export type GlobalValues = OptionValues<typeof GLOBAL_OPTIONS>;

/** Validated `--backend`; undefined when not given (commands pick their own default). */
export function backendOf(value: string | undefined): Backend | undefined {
  if (value === undefined) return undefined;
  if (value === "auto" || value === "mmap" || value === "pread") return value;
  throw new UsageError(`--backend must be auto, mmap or pread (got ${JSON.stringify(value)})`);
}

const optionName = (token: string) => {
  const equals = token.indexOf("=");
  return equals < 0 ? token : token.slice(0, equals);
};

function shortOf(options: OptionSpecs, letter: string): string | undefined {
  for (const [name, spec] of Object.entries(options)) if (spec.short === letter) return name;
  return undefined;
}

function allSpellings(options: OptionSpecs): string[] {
  const spellings: string[] = [];
  for (const [name, spec] of Object.entries(options)) {
    spellings.push(`--${name}`);
    if (spec.short) spellings.push(`-${spec.short}`);
  }
  return spellings;
}

/**
 * Split `argv` at the command name. Global options may come first; so may the command's own options
 * (`safetensors --json inspect FILE`, as people type them): when a word before the command is not a global option,
 * the command is the first of `commands` among the words, and every non-global word before it is carried into
 * `rest` (ahead of the words after it) to be parsed with the command's options, which name any that is unknown.
 * Returns the command (undefined when there is none), the global options seen before it, and the command's words.
 */
export function splitAtCommand(
  argv: string[],
  commands: readonly string[] = [],
): { command: string | undefined; before: string[]; rest: string[] } {
  const before: string[] = [];
  const carried: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const token = argv[i]!;
    if (token === "--") return { command: argv[i + 1], before, rest: [...carried, ...argv.slice(i + 2)] };
    if (!token.startsWith("-") || token === "-") {
      if (carried.length === 0 || commands.includes(token)) {
        return { command: token, before, rest: [...carried, ...argv.slice(i + 1)] };
      }
      carried.push(token);
      continue;
    }
    const name = token.startsWith("--") ? optionName(token).slice(2) : shortOf(GLOBAL_OPTIONS, token.slice(1, 2));
    const spec = name === undefined ? undefined : (GLOBAL_OPTIONS as OptionSpecs)[name];
    if (spec === undefined) {
      carried.push(token);
      continue;
    }
    const words = spec.type === "string" && !token.includes("=") ? 2 : 1;
    before.push(...argv.slice(i, i + words));
    i += words - 1;
  }
  if (carried.length > 0) {
    // No command among the words: the first plain word was meant as one, else the first option is unknown.
    const word = carried.find((candidate) => !candidate.startsWith("-") || candidate === "-");
    if (word !== undefined)
      throw new UsageError(`unknown command ${JSON.stringify(word)}${didYouMean(word, commands)}`);
    const option = optionName(carried[0]!);
    throw new UsageError(`unknown option ${option}${didYouMean(option, allSpellings(GLOBAL_OPTIONS))}`);
  }
  return { command: undefined, before, rest: [] };
}

/**
 * Parse a command's words against its options plus the global ones. A string option always takes the next word as
 * its value, even one that starts with "-" (slice specs such as "-1, :", or "-" for standard output), which
 * node's parseArgs would otherwise refuse as ambiguous.
 */
export function parseOptions<O extends OptionSpecs>(
  argv: string[],
  options: O,
): { values: OptionValues<O> & GlobalValues; positionals: string[] } {
  const all: OptionSpecs = { ...GLOBAL_OPTIONS, ...options };
  const words: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const token = argv[i]!;
    if (token === "--") {
      words.push(...argv.slice(i));
      break;
    }
    if (token === "-" || !token.startsWith("-")) {
      words.push(token);
      continue;
    }
    let name: string | undefined;
    let inlineValue: string | undefined;
    if (token.startsWith("--")) {
      name = optionName(token).slice(2);
      if (token.includes("=")) inlineValue = token.slice(token.indexOf("=") + 1);
    } else {
      name = shortOf(all, token.slice(1, 2));
      if (token.length > 2) inlineValue = token.slice(2);
    }
    const spec = name === undefined ? undefined : all[name];
    if (name === undefined || spec === undefined) {
      const shown = token.startsWith("--") ? optionName(token) : token.slice(0, 2);
      throw new UsageError(`unknown option ${shown}${didYouMean(shown, allSpellings(all))}`);
    }
    if (spec.type === "boolean") {
      if (inlineValue !== undefined) throw new UsageError(`--${name} takes no value`);
      words.push(`--${name}`);
    } else if (inlineValue !== undefined) {
      words.push(`--${name}=${inlineValue}`);
    } else if (i + 1 < argv.length) {
      words.push(`--${name}=${argv[++i]}`);
    } else {
      throw new UsageError(`--${name} needs a value${spec.value ? ` (${spec.value})` : ""}`);
    }
  }
  const config: Record<string, { type: "string" | "boolean"; multiple?: boolean }> = {};
  for (const [name, spec] of Object.entries(all)) {
    config[name] = spec.multiple ? { type: spec.type, multiple: true } : { type: spec.type };
  }
  try {
    const parsed = parseArgs({ args: words, options: config, allowPositionals: true, strict: true });
    return { values: parsed.values as OptionValues<O> & GlobalValues, positionals: parsed.positionals };
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}
