/** `safetensors rename`: new tensor names, bytes copied as they are. */
import { quoteName, SafetensorError } from "../format/errors.js";
import { tensorNotFound } from "../format/suggest.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import { REWRITE_NOTES, REWRITE_OPTIONS, regexOption, rewrite, rewriteEach } from "./rewrite.js";

export const command = defineCommand({
  usage: "rename IN OUT (--map OLD=NEW... | --sub REGEX=REPLACEMENT) [--json]",
  description: `Rename tensors: --map OLD=NEW (repeatable; OLD must exist; split at the first "=") or --sub REGEX=REPLACEMENT
(every match in every name replaced, JavaScript syntax: $1 is the first group; split at the first "=" not inside
the regular expression's brackets or after a backslash). Two tensors may not end with the same name. IN is a file
(OUT a file) or a sharded checkpoint (OUT a directory: the same shards, the index's weight map renamed).

${REWRITE_NOTES}`,
  options: {
    map: { type: "string", multiple: true, value: "OLD=NEW", help: "rename one tensor (repeatable)" },
    sub: { type: "string", value: "REGEX=REPL", help: "rename every tensor whose name matches" },
    ...REWRITE_OPTIONS,
  },
  run({ values, positionals }, { io }) {
    if (positionals.length !== 2) throw new UsageError("rename takes IN and OUT");
    const [input, out] = positionals as [string, string];
    if ((values.map?.length ?? 0) === 0 && values.sub === undefined)
      throw new UsageError("give --map OLD=NEW... or --sub REGEX=REPL");
    if (values.map?.length && values.sub !== undefined) throw new UsageError("give --map or --sub, not both");
    const rename = values.sub !== undefined ? substitution(values.sub) : mapping(values.map!);
    return rewrite(input, io, values.json, (checkpoint, progress) => {
      if (rename.names) {
        const all = new Set(checkpoint.tensors.map((t) => t.name));
        for (const name of rename.names) {
          if (!all.has(name)) throw tensorNotFound(name, all);
        }
      }
      const renamed = new Map<string, string>();
      for (const t of checkpoint.tensors) {
        const name = rename.apply(t.name);
        const before = renamed.get(name);
        if (before !== undefined) {
          throw new SafetensorError(
            "DuplicateKey",
            `${quoteName(before)} and ${quoteName(t.name)} would both be named ${quoteName(name)}`,
          );
        }
        renamed.set(name, t.name);
      }
      const summary = rewriteEach(
        checkpoint,
        out,
        { inPlace: values["in-place"], fsync: values.fsync },
        progress,
        (file) => ({
          tensors: file.tensors.map((source) => ({ name: rename.apply(source.name), source, dtype: source.dtype })),
          metadata: file.metadata,
        }),
        rename.apply,
      );
      const changed = [...renamed].filter(([name, before]) => name !== before).length;
      return { ...summary, detail: `${changed} renamed` };
    });
  },
});

function mapping(pairs: readonly string[]): { apply: (name: string) => string; names: string[] } {
  const map = new Map<string, string>();
  for (const pair of pairs) {
    const at = pair.indexOf("=");
    if (at < 0) throw new UsageError(`--map ${JSON.stringify(pair)}: expected OLD=NEW`);
    const old = pair.slice(0, at);
    if (map.has(old)) throw new UsageError(`--map: ${JSON.stringify(old)} is renamed twice`);
    map.set(old, pair.slice(at + 1));
  }
  return { apply: (name) => map.get(name) ?? name, names: [...map.keys()] };
}

/** Split REGEX=REPL at the first "=" outside a character class, not escaped and not in a lookaround's `(?=`. */
function substitution(text: string): { apply: (name: string) => string; names: null } {
  let inClass = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === "\\") i++;
    else if (c === "[") inClass = true;
    else if (c === "]") inClass = false;
    else if (c === "=" && !inClass && text[i - 1] !== "?" && text.slice(i - 2, i) !== "?<") {
      const regex = regexOption(text.slice(0, i), "--sub");
      const global = new RegExp(regex.source, "gu");
      const replacement = text.slice(i + 1);
      return { apply: (name) => name.replace(global, replacement), names: null };
    }
  }
  throw new UsageError(`--sub ${JSON.stringify(text)}: expected REGEX=REPLACEMENT`);
}
