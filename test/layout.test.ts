/**
 * The core entry point must run in browsers: nothing reachable from src/index.ts may import a `node:` module or a
 * Node global module. Checked on the import graph of the sources.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { repoRoot } from "./helpers/corpus.js";

const IMPORT = /(?:^|\n)\s*(?:import|export)\s[^;]*?from\s+"([^"]+)"|import\(\s*"([^"]+)"\s*\)/g;

function reachable(entry: string): Map<string, string[]> {
  const seen = new Map<string, string[]>();
  const visit = (file: string) => {
    if (seen.has(file)) return;
    const source = fs.readFileSync(file, "utf8");
    const specifiers = [...source.matchAll(IMPORT)].map((m) => (m[1] ?? m[2])!);
    seen.set(file, specifiers);
    for (const specifier of specifiers) {
      if (specifier.startsWith(".")) visit(path.resolve(path.dirname(file), specifier.replace(/\.js$/, ".ts")));
    }
  };
  visit(entry);
  return seen;
}

test("the core entry point imports nothing from Node", () => {
  const graph = reachable(path.join(repoRoot, "src/index.ts"));
  assert.ok(graph.size > 10, `only ${graph.size} modules found: is the import scan broken?`);
  assertPure(graph);
});

function assertPure(graph: Map<string, string[]>): void {
  for (const [file, specifiers] of graph) {
    for (const specifier of specifiers) {
      assert.ok(specifier.startsWith("."), `${path.relative(repoRoot, file)} imports ${specifier}`);
    }
    assert.doesNotMatch(
      fs.readFileSync(file, "utf8"),
      /\bprocess\.|\bBuffer\.|require\(/,
      path.relative(repoRoot, file),
    );
  }
}

/** Folders that must stay pure (browser-safe) whether or not src/index.ts reaches them yet. */
const PURE_FOLDERS = ["src/pickle", "src/rank", "src/view", "src/gpu"];

test("pure folders import nothing from Node", () => {
  for (const folder of PURE_FOLDERS) {
    // `node-*.ts` files are a folder's Node adapters (as in src/io), the only ones allowed Node APIs.
    const files = fs
      .readdirSync(path.join(repoRoot, folder))
      .filter((f) => f.endsWith(".ts") && !f.startsWith("node-"));
    assert.ok(files.length > 0, `${folder} has no sources`);
    for (const file of files) assertPure(reachable(path.join(repoRoot, folder, file)));
  }
});

/** Pure modules that the core entry point may not reach yet (or not at all) but that must stay browser-safe. */
const PURE = [
  "src/read/async-file.ts",
  "src/io/async-source.ts",
  "src/io/async-decorators.ts",
  "src/remote/http.ts",
  "src/remote/hf.ts",
  "src/shards/index.ts",
  "src/edit/bounds.ts",
  "src/edit/cast.ts",
  "src/edit/fill.ts",
  "src/edit/mask-kernel.ts",
  "src/edit/npy.ts",
  "src/shards/async.ts",
  "src/remote/location.ts",
];

test("pure modules import nothing from Node", () => {
  for (const file of PURE) assertPure(reachable(path.join(repoRoot, file)));
});
