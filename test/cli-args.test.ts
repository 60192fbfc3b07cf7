/** The CLI's shared pieces: the command registry, option parsing, did-you-mean. */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { parseOptions, splitAtCommand, UsageError } from "../src/cli/args.js";
import { COMMANDS } from "../src/cli/commands.js";
import { commandHelp } from "../src/cli/help.js";
import { editDistance, suggest } from "../src/cli/suggest.js";

describe("command registry", () => {
  test("names are unique, and every command loads with a synopsis starting with its name", async () => {
    const names = COMMANDS.map((entry) => entry.name);
    assert.equal(new Set(names).size, names.length);
    for (const entry of COMMANDS) {
      assert.ok(entry.summary.length > 0 && !entry.summary.includes("\n"), entry.name);
      const { command } = await entry.load();
      for (const line of command.usage.split("\n")) assert.ok(line.startsWith(`${entry.name}`), line);
      const help = commandHelp(command);
      for (const option of Object.keys(command.options)) assert.match(help, new RegExp(`--${option}\\b`), entry.name);
    }
  });
});

describe("option parsing", () => {
  const options = {
    json: { type: "boolean", help: "" },
    out: { type: "string", short: "o", value: "PATH", help: "" },
    slice: { type: "string", help: "" },
  } as const;

  test("string options take the next word even when it starts with '-'", () => {
    const { values, positionals } = parseOptions(["f", "--slice", "-1, :", "-o", "-", "x", "--json"], options);
    assert.deepEqual(positionals, ["f", "x"]);
    assert.equal(values.slice, "-1, :");
    assert.equal(values.out, "-");
    assert.equal(values.json, true);
    assert.equal(parseOptions(["--out=a=b", "-oq"], options).values.out, "q");
  });

  test("global options mix with the command's; '-' and words after '--' are positionals", () => {
    const { values, positionals } = parseOptions(["-", "--backend", "pread", "--", "--json"], options);
    assert.equal(values.backend, "pread");
    assert.deepEqual(positionals, ["-", "--json"]);
  });

  test("unknown options and misuse are usage errors with a suggestion", () => {
    assert.throws(() => parseOptions(["--jsno"], options), /unknown option --jsno \(did you mean "--json"\?\)/);
    assert.throws(
      () => parseOptions(["--zzzzzz"], options),
      (e: Error) => e instanceof UsageError && !/did you mean/.test(e.message),
    );
    assert.throws(() => parseOptions(["--out"], options), /--out needs a value \(PATH\)/);
    assert.throws(() => parseOptions(["--json=yes"], options), /--json takes no value/);
  });

  test("the command is found after global options", () => {
    assert.deepEqual(splitAtCommand(["--backend", "mmap", "-h", "inspect", "f"]), {
      command: "inspect",
      before: ["--backend", "mmap", "-h"],
      rest: ["f"],
    });
    assert.equal(splitAtCommand(["--help"]).command, undefined);
    assert.throws(() => splitAtCommand(["--bakend=x"]), /unknown option --bakend \(did you mean "--backend"\?\)/);
  });

  test("the command's own options may come before it, and are parsed with the command's", () => {
    const commands = ["inspect", "get"];
    assert.deepEqual(splitAtCommand(["--json", "--backend=mmap", "inspect", "f"], commands), {
      command: "inspect",
      before: ["--backend=mmap"],
      rest: ["--json", "f"],
    });
    // A value of a command option is carried with it; the command is the first word that names one.
    assert.deepEqual(splitAtCommand(["--out", "x.bin", "-V", "get", "f", "t"], commands), {
      command: "get",
      before: ["-V"],
      rest: ["--out", "x.bin", "f", "t"],
    });
    // An unknown option before the command is named by the command's parser, with the command's spellings.
    const { rest } = splitAtCommand(["--bakend=x", "inspect"], commands);
    assert.throws(
      () => parseOptions(rest, { json: { type: "boolean", help: "" } }),
      /unknown option --bakend \(did you mean "--backend"\?\)/,
    );
    // No command among the words: the misspelt command is named, not the option before it.
    assert.throws(
      () => splitAtCommand(["--json", "inspct", "f"], commands),
      /unknown command "inspct" \(did you mean "inspect"\?\)/,
    );
  });
});

describe("did you mean", () => {
  test("edit distance counts an adjacent swap once", () => {
    assert.equal(editDistance("inspect", "inspect"), 0);
    assert.equal(editDistance("inpsect", "inspect"), 1);
    assert.equal(editDistance("", "abc"), 3);
    assert.equal(editDistance("kitten", "sitting"), 3);
  });

  test("close names and prefixes are suggested, far ones are not", () => {
    const names = ["inspect", "validate", "hash", "get", "doctor"];
    assert.deepEqual(suggest("inpect", names), ["inspect"]);
    assert.deepEqual(suggest("val", names), ["validate"]);
    assert.deepEqual(suggest("hsah", names), ["hash"]);
    assert.deepEqual(suggest("frobnicate", names), []);
  });
});
