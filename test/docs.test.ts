/**
 * The user docs (README.md and docs/*.md) are true to the code:
 * - every TypeScript block typechecks against the BUILT package, imported as a user's project imports it
 *   (`safetensors-ts` resolved through a scratch node_modules/safetensors-ts linked to this checkout, so
 *   package.json's `exports` and dist/*.d.ts are what the compiler sees);
 * - every relative link resolves, to a file and, with `#anchor`, to a heading of that file;
 * - docs/cli-reference.md is what `npm run docs:cli` writes from the commands' own --help, and every `safetensors`
 *   line of a sh block names a command that exists, with options its --help lists;
 * - every error code the library can throw has its row in docs/errors.md.
 * Fast (a few seconds: one tsc run over every block). Skips, saying why, when dist/ or typescript is absent.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { after, describe, test } from "node:test";
import { CLI_REFERENCE_PATH, cliReference, DOCS_CLI_COMMAND } from "../scripts/docs-cli.js";
import { repoRoot } from "./helpers/reference.js";

/** The user-facing Markdown: the README and every page of docs/ (the generated API reference, docs/api/, is HTML). */
function userDocs(): string[] {
  const docs = join(repoRoot, "docs");
  const pages = readdirSync(docs)
    .filter((name) => name.endsWith(".md"))
    .sort()
    .map((name) => join(docs, name));
  return [join(repoRoot, "README.md"), ...pages];
}

const rel = (path: string) => relative(repoRoot, path);

interface CodeBlock {
  file: string;
  /** 1-based line of the block's first code line in its file. */
  line: number;
  code: string;
}

/** Fenced blocks whose info string is one of `languages`. */
function fencedBlocks(file: string, languages: readonly string[]): CodeBlock[] {
  const lines = readFileSync(file, "utf8").split("\n");
  const blocks: CodeBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)(`{3,}|~{3,})\s*(\S*)/.exec(lines[i]!);
    if (!open) continue;
    const fence = open[2]!;
    const start = i + 1;
    let end = start;
    while (end < lines.length && !lines[end]!.trimStart().startsWith(fence)) end++;
    if (languages.includes(open[3]!)) {
      blocks.push({ file, line: start + 1, code: lines.slice(start, end).join("\n") });
    }
    i = end;
  }
  return blocks;
}

/** GitHub's heading anchors (github-slugger): lower case, punctuation dropped, spaces to '-', repeats numbered. */
function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  let fence: string | undefined;
  for (const line of markdown.split("\n")) {
    const marker = /^\s*(`{3,}|~{3,})/.exec(line)?.[1];
    if (marker !== undefined && (fence === undefined || marker.startsWith(fence))) {
      fence = fence === undefined ? marker : undefined;
      continue;
    }
    if (fence !== undefined) continue;
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)?.[1];
    if (heading === undefined) continue;
    const text = heading
      .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1")
      .replace(/<[^>]+>/g, "")
      .toLowerCase()
      .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, "")
      .replaceAll(" ", "-");
    const count = seen.get(text) ?? 0;
    seen.set(text, count + 1);
    anchors.add(count === 0 ? text : `${text}-${count}`);
  }
  for (const match of markdown.matchAll(/<a\s+(?:name|id)="([^"]+)"/g)) anchors.add(match[1]!);
  return anchors;
}

/** Relative link targets outside code: `[text](target)`. */
function linksOf(markdown: string): { target: string; line: number }[] {
  const links: { target: string; line: number }[] = [];
  let fence: string | undefined;
  markdown.split("\n").forEach((line, i) => {
    const marker = /^\s*(`{3,}|~{3,})/.exec(line)?.[1];
    if (marker !== undefined && (fence === undefined || marker.startsWith(fence))) {
      fence = fence === undefined ? marker : undefined;
      return;
    }
    if (fence !== undefined) return;
    const text = line.replace(/`[^`]*`/g, "");
    for (const match of text.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
      links.push({ target: match[1]!, line: i + 1 });
    }
  });
  return links;
}

describe("user docs: links", () => {
  test("every relative link in README.md and docs/*.md names a file that exists, and a heading there", () => {
    const broken: string[] = [];
    const anchorCache = new Map<string, Set<string>>();
    for (const file of userDocs()) {
      for (const { target, line } of linksOf(readFileSync(file, "utf8"))) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:, ...
        const [path, anchor] = target.split("#", 2) as [string, string | undefined];
        const resolved = path === "" ? file : resolve(dirname(file), decodeURIComponent(path));
        const where = `${rel(file)}:${line}: ${target}`;
        if (!existsSync(resolved)) {
          broken.push(`${where} (no such file)`);
          continue;
        }
        if (anchor === undefined || anchor === "") continue;
        if (!resolved.endsWith(".md") || statSync(resolved).isDirectory()) continue;
        let anchors = anchorCache.get(resolved);
        if (anchors === undefined) {
          anchors = anchorsOf(readFileSync(resolved, "utf8"));
          anchorCache.set(resolved, anchors);
        }
        if (!anchors.has(anchor)) broken.push(`${where} (no heading #${anchor} in ${rel(resolved)})`);
      }
    }
    assert.deepEqual(broken, [], `broken links:\n${broken.join("\n")}`);
  });

  test("the anchor rule is GitHub's", () => {
    const anchors = anchorsOf("# Reading: files, views & slices\n## `openFile(path)`\n## Limits\n## Limits\n");
    assert.deepEqual([...anchors], ["reading-files-views--slices", "openfilepath", "limits", "limits-1"]);
  });
});

describe("user docs: generated CLI reference", () => {
  test(`docs/cli-reference.md is what \`${DOCS_CLI_COMMAND}\` writes from the commands' --help`, async () => {
    const expected = await cliReference();
    const actual = existsSync(CLI_REFERENCE_PATH) ? readFileSync(CLI_REFERENCE_PATH, "utf8") : "";
    assert.ok(
      actual === expected,
      `docs/cli-reference.md is out of date with the commands' --help: run \`${DOCS_CLI_COMMAND}\` and commit docs/cli-reference.md`,
    );
  });
});

/** Each command's `--help` text, from the generated reference: `## NAME` then its fenced help. */
function helpTexts(reference: string): Map<string, string> {
  const texts = new Map<string, string>();
  for (const section of reference.split(/^## /m).slice(1)) {
    const name = section.slice(0, section.indexOf("\n")).trim();
    texts.set(name, section);
  }
  return texts;
}

describe("user docs: shell examples", () => {
  test("every `safetensors` command in a sh block of the docs exists and takes the options it is given", async () => {
    const help = helpTexts(await cliReference());
    const globalHelp = help.get("safetensors --help") ?? "";
    const wrong: string[] = [];
    let checked = 0;
    for (const block of userDocs().flatMap((file) => fencedBlocks(file, ["sh", "bash", "shell"]))) {
      block.code.split("\n").forEach((text, i) => {
        const where = `${rel(block.file)}:${block.line + i}`;
        const line = text.replace(/\s#\s.*$/, "");
        for (const segment of line.split(/&&|\|\||[|;]/)) {
          const words = segment.trim().match(/'[^']*'|"[^"]*"|\S+/g) ?? [];
          if (words[0] === "npx") words.shift();
          if (words[0] !== "safetensors") continue;
          const command = words.slice(1).find((word) => !word.startsWith("-"));
          if (command === undefined || words.slice(1).every((word) => word.startsWith("-"))) continue;
          checked++;
          const text = help.get(command);
          if (text === undefined) {
            wrong.push(`${where}: no command "${command}"`);
            continue;
          }
          for (const word of words) {
            if (!word.startsWith("--")) continue;
            const option = word.split("=")[0]!;
            if (!new RegExp(`${option}(?![\\w-])`).test(text) && !globalHelp.includes(option)) {
              wrong.push(`${where}: "safetensors ${command}" has no option ${option}`);
            }
          }
        }
      });
    }
    assert.ok(checked >= 20, `only ${checked} safetensors command lines found in sh blocks`);
    assert.deepEqual(wrong, [], `shell examples that do not match the commands' --help:\n${wrong.join("\n")}`);
  });
});

describe("user docs: every command", () => {
  test("the README's command list and docs/cli.md's task table name every command the CLI has", async () => {
    const { COMMANDS } = await import("../src/cli/commands.js");
    const named = (text: string) => new Set([...text.matchAll(/`([a-z][a-z-]*)`/g)].map((m) => m[1]!));
    const readme = readFileSync(join(repoRoot, "README.md"), "utf8");
    const list = readme.slice(readme.indexOf("Every command:"), readme.indexOf("safetensors --help` says"));
    const cli = readFileSync(join(repoRoot, "docs", "cli.md"), "utf8");
    const table = cli.slice(cli.indexOf("## Tasks and their guides"), cli.indexOf("## Conventions"));
    for (const [where, text] of [
      ["README.md's command list", list],
      ["docs/cli.md's task table", table],
    ] as const) {
      assert.ok(text.length > 0, `${where} is not there`);
      const missing = COMMANDS.map((c) => c.name).filter((name) => !named(text).has(name));
      assert.deepEqual(missing, [], `${where} leaves out: ${missing.join(", ")}`);
    }
  });
});

describe("user docs: error codes", () => {
  test("every SafetensorErrorCode has a row in docs/errors.md", () => {
    const source = readFileSync(join(repoRoot, "src", "format", "errors.ts"), "utf8");
    const headerCodes = source.slice(source.indexOf("HEADER_ERROR_CODES = ["), source.indexOf("] as const"));
    const union = source.slice(source.indexOf("export type SafetensorErrorCode"), source.indexOf("export class"));
    const declared = [...headerCodes.matchAll(/"(\w+)"/g), ...union.matchAll(/^\s*\|\s*"(\w+)"/gm)].map((m) => m[1]!);
    assert.ok(declared.length > 40, `found only ${declared.length} codes in src/format/errors.ts`);
    const page = readFileSync(join(repoRoot, "docs", "errors.md"), "utf8");
    const rows = new Set([...page.matchAll(/^\|\s*`(\w+)`/gm)].map((m) => m[1]!));
    const missing = declared.filter((code) => !rows.has(code));
    assert.deepEqual(missing, [], `docs/errors.md has no table row (| \`CODE\` | ...) for: ${missing.join(", ")}`);
    const unknown = [...rows].filter((code) => !declared.includes(code));
    assert.deepEqual(unknown, [], `docs/errors.md lists codes the library does not have: ${unknown.join(", ")}`);
  });
});

const TSC = join(repoRoot, "node_modules", "typescript", "bin", "tsc");
const builtTypes = join(repoRoot, "dist", "node.d.ts");
const typesNode = join(repoRoot, "node_modules", "@types", "node");
const codeSkip = !existsSync(TSC)
  ? `typescript is not installed at ${rel(TSC)} (run npm ci)`
  : !existsSync(builtTypes)
    ? "the package is not built (dist/node.d.ts is missing: run npm run build)"
    : !existsSync(typesNode)
      ? "@types/node is not installed (run npm ci)"
      : undefined;
if (codeSkip) console.error(`\n!!! docs code-block typecheck is SKIPPED: ${codeSkip} !!!\n`);

/** The newest source file, to say so when dist/ is older than src/ (a failure may then be a stale build). */
function newestSource(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestSource(path) : statSync(path).mtimeMs);
  }
  return newest;
}

describe("user docs: code blocks", () => {
  const scratch = mkdtempSync(join(tmpdir(), "st-docs-"));
  after(() => rmSync(scratch, { recursive: true, force: true }));

  test("every ts block in README.md and docs/*.md typechecks against the built package", { skip: codeSkip }, () => {
    // A user's project: node_modules/safetensors-ts is this package (its package.json exports, its dist/ types).
    mkdirSync(join(scratch, "node_modules"));
    symlinkSync(repoRoot, join(scratch, "node_modules", "safetensors-ts"), "dir");
    const blocks = userDocs().flatMap((file) => fencedBlocks(file, ["ts", "typescript"]));
    assert.ok(blocks.length >= 10, `only ${blocks.length} TypeScript blocks found in the docs`);
    const names: string[] = [];
    blocks.forEach((block, i) => {
      const name = `block-${String(i).padStart(3, "0")}.ts`;
      names.push(name);
      // Each block is a module of its own (top-level await and `using` allowed), as a user's script would be.
      writeFileSync(join(scratch, name), `${block.code}\nexport {};\n`);
    });
    const compilerOptions = {
      target: "ES2022",
      module: "NodeNext",
      moduleResolution: "NodeNext",
      lib: ["ES2022", "DOM", "DOM.Iterable", "ESNext.Disposable"],
      strict: true,
      noEmit: true,
      skipLibCheck: true,
      types: ["node"],
      typeRoots: [join(repoRoot, "node_modules", "@types")],
    };
    writeFileSync(join(scratch, "package.json"), JSON.stringify({ name: "docs-blocks", type: "module" }));
    writeFileSync(join(scratch, "tsconfig.json"), JSON.stringify({ compilerOptions, files: names }, null, 2));
    const result = spawnSync(process.execPath, [TSC, "-p", "tsconfig.json", "--pretty", "false"], {
      cwd: scratch,
      encoding: "utf8",
    });
    if (result.status === 0) return;
    // Errors point at the block's lines in the Markdown file.
    const report = `${result.stdout}${result.stderr}`.replace(
      /block-(\d{3})\.ts\((\d+),(\d+)\)/g,
      (_, index: string, line: string, column: string) => {
        const block = blocks[Number(index)]!;
        return `${rel(block.file)}:${block.line + Number(line) - 1}:${column}`;
      },
    );
    const stale =
      statSync(builtTypes).mtimeMs < newestSource(join(repoRoot, "src"))
        ? "\n(dist/ is older than src/: if the docs describe new code, run npm run build first)"
        : "";
    assert.fail(`code blocks in the docs do not typecheck against the built package:\n${report}${stale}`);
  });
});
