/** Help and usage text, built from the registry and each command's declared options. */
import { GLOBAL_OPTIONS, type OptionSpecs } from "./args.js";
import type { Command } from "./command.js";
import { COMMANDS } from "./commands.js";

export const EXIT_STATUS = "exit status: 0 ok, 1 invalid input (bad file, missing tensor, I/O error), 2 usage error";

function optionLines(options: OptionSpecs): string[] {
  const left = Object.entries(options).map(
    ([name, spec]) => `${spec.short ? `-${spec.short}, ` : ""}--${name}${spec.value ? ` ${spec.value}` : ""}`,
  );
  const width = Math.max(0, ...left.map((text) => text.length));
  return Object.values(options).map((spec, i) => `  ${left[i]!.padEnd(width)}  ${spec.help}`);
}

const synopsis = (command: Command) =>
  command.usage.split("\n").map((line, i) => `${i === 0 ? "usage: " : "       "}safetensors ${line}`);

export function topLevelHelp(): string {
  const width = Math.max(...COMMANDS.map((entry) => entry.name.length));
  return [
    "usage: safetensors COMMAND [options] [FILE...]",
    "",
    "commands:",
    ...COMMANDS.map((entry) => `  ${entry.name.padEnd(width)}  ${entry.summary}`),
    "",
    "global options (before or after the command):",
    ...optionLines(GLOBAL_OPTIONS),
    "",
    "Run 'safetensors COMMAND --help' (or 'safetensors help COMMAND') for a command's options.",
    EXIT_STATUS,
    "",
  ].join("\n");
}

export function commandHelp(command: Command): string {
  const lines = [...synopsis(command), "", command.description.trimEnd(), ""];
  if (Object.keys(command.options).length > 0) lines.push("options:", ...optionLines(command.options), "");
  lines.push("global options:", ...optionLines(GLOBAL_OPTIONS), "", EXIT_STATUS, "");
  return lines.join("\n");
}

/** The short form shown with a usage error: the synopsis and where to read more. */
export function usageHint(name: string | undefined, command: Command | undefined): string {
  if (name === undefined || command === undefined) {
    return "usage: safetensors COMMAND [options]; 'safetensors --help' lists the commands\n";
  }
  return `${synopsis(command).join("\n")}\n'safetensors ${name} --help' for details\n`;
}
