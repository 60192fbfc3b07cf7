/**
 * The shape of the house, checked on the import graph of src/ and the C modules of native/ (docs/ARCHITECTURE.md
 * draws it):
 * - no import cycles, between files or between folders;
 * - layers: a file imports only from its own folder or from folders of a lower layer (LAYERS below);
 * - purity: the core entry point (src/index.ts) reaches nothing from Node and no package; pure folders and the pure
 *   modules of mixed folders import nothing from Node (`node-*.ts` files are a folder's Node adapters).
 * Every `import ... from`, `export ... from`, `import "..."` and `import("...")` with a literal specifier counts,
 * type-only imports too (an arrow in the types is an arrow in the design).
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import { builtinModules } from "node:module";
import * as path from "node:path";
import { test } from "node:test";
import { repoRoot } from "./helpers/corpus.js";

/**
 * The layers, lowest first. A folder may import from its own files and from folders of a strictly lower layer, never
 * from its own layer or above. A new folder gets a line here (and in docs/ARCHITECTURE.md); `pure` says whether all
 * its files but `node-*.ts` must run in browsers, or only the modules listed in PURE.
 */
const LAYERS: readonly (readonly { folder: string; pure: boolean }[])[] = [
  [{ folder: "format", pure: true }],
  [
    { folder: "codecs", pure: true },
    { folder: "slice", pure: true },
  ],
  [{ folder: "io", pure: false }],
  [{ folder: "remote", pure: true }],
  [{ folder: "read", pure: true }],
  [{ folder: "shards", pure: false }],
  [
    { folder: "edit", pure: false },
    { folder: "pickle", pure: true },
    { folder: "rank", pure: true },
  ],
  [{ folder: "integrity", pure: false }],
  [
    { folder: "view", pure: true },
    { folder: "merge", pure: true },
    { folder: "gguf", pure: true },
    { folder: "gpu", pure: true },
  ],
  [{ folder: "cli", pure: false }],
];

/** The entry points: the only files at the top of src/, above every folder; nothing in a folder imports them. */
const ENTRIES = new Map([
  ["src/index.ts", 0],
  ["src/node.ts", 1],
]);

/** Pure modules of the mixed folders (the rest of those folders may use Node). */
const PURE = [
  "src/io/async-source.ts",
  "src/io/async-decorators.ts",
  "src/io/source.ts",
  "src/io/file-views.ts",
  "src/shards/index.ts",
  "src/shards/async.ts",
  "src/shards/view.ts",
  "src/edit/bounds.ts",
  "src/edit/cast.ts",
  "src/edit/fill.ts",
  "src/edit/mask-kernel.ts",
  "src/edit/npy.ts",
  "src/edit/crc32c.ts",
  "src/integrity/patch-format.ts",
  "src/integrity/manifest-format.ts",
];

const IMPORT =
  /(?:^|\n)\s*(?:import|export)\s[^;]*?from\s+"([^"]+)"|(?:^|\n)\s*import\s+"([^"]+)"|import\(\s*"([^"]+)"\s*\)/g;

export type Graph = Map<string, string[]>;

/** Every module under `dir` (repo-relative paths) with the specifiers it imports, relative ones resolved. */
function importGraph(dir: string): Graph {
  const graph: Graph = new Map();
  const walk = (folder: string) => {
    for (const entry of fs.readdirSync(folder, { withFileTypes: true })) {
      const file = path.join(folder, entry.name);
      if (entry.isDirectory()) walk(file);
      else if (entry.name.endsWith(".ts")) graph.set(path.relative(repoRoot, file), importsOf(file));
    }
  };
  walk(path.join(repoRoot, dir));
  return graph;
}

function importsOf(file: string): string[] {
  const source = fs.readFileSync(file, "utf8");
  return [...source.matchAll(IMPORT)].map((m) => {
    const specifier = (m[1] ?? m[2] ?? m[3])!;
    if (!specifier.startsWith(".")) return specifier;
    return path.relative(repoRoot, path.resolve(path.dirname(file), specifier.replace(/\.js$/, ".ts")));
  });
}

const isLocal = (specifier: string) => specifier.startsWith("src/");

/** The cycles of a graph (its strongly connected components of more than one node, or a node importing itself). */
export function cycles(graph: Graph): string[][] {
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (node: string) => {
    index.set(node, counter);
    low.set(node, counter);
    counter++;
    stack.push(node);
    onStack.add(node);
    for (const next of graph.get(node) ?? []) {
      if (!graph.has(next)) continue;
      if (!index.has(next)) {
        visit(next);
        low.set(node, Math.min(low.get(node)!, low.get(next)!));
      } else if (onStack.has(next)) {
        low.set(node, Math.min(low.get(node)!, index.get(next)!));
      }
    }
    if (low.get(node) === index.get(node)) {
      const component: string[] = [];
      let member: string;
      do {
        member = stack.pop()!;
        onStack.delete(member);
        component.push(member);
      } while (member !== node);
      if (component.length > 1 || (graph.get(node) ?? []).includes(node)) found.push(component.sort());
    }
  };
  for (const node of graph.keys()) if (!index.has(node)) visit(node);
  return found;
}

/** The folder of a module under src/ ("read" for src/read/file.ts), or its path for a file at the top. */
const folderOf = (file: string) => {
  const parts = file.split("/");
  return parts.length > 2 ? parts[1]! : file;
};

function layerOf(file: string): number | undefined {
  const entry = ENTRIES.get(file);
  if (entry !== undefined) return LAYERS.length + entry;
  const folder = folderOf(file);
  const layer = LAYERS.findIndex((floor) => floor.some((room) => room.folder === folder));
  return layer < 0 ? undefined : layer;
}

/** Arrows against the layers: imports of a module of the same layer (another folder) or of a higher one. */
export function backArrows(graph: Graph): string[] {
  const wrong: string[] = [];
  for (const [file, specifiers] of graph) {
    const from = layerOf(file);
    if (from === undefined) {
      wrong.push(`${file} is in no layer: put it in a folder listed in LAYERS (test/layout.test.ts)`);
      continue;
    }
    for (const target of specifiers.filter(isLocal)) {
      if (folderOf(target) === folderOf(file)) continue;
      const to = layerOf(target);
      if (to === undefined || to >= from) wrong.push(`${file} -> ${target}`);
    }
  }
  return wrong;
}

/** Folder-level graph: one arrow per folder pair with at least one import between them. */
function folderGraph(graph: Graph): Graph {
  const folders: Graph = new Map();
  for (const [file, specifiers] of graph) {
    const from = folderOf(file);
    const targets = folders.get(from) ?? [];
    for (const target of specifiers.filter(isLocal)) {
      const to = folderOf(target);
      if (to !== from && !targets.includes(to)) targets.push(to);
    }
    folders.set(from, targets);
  }
  return folders;
}

const graph = importGraph("src");

test("the checks find what they look for (a cycle, a back-arrow, an unplaced file)", () => {
  const fake: Graph = new Map([
    ["src/format/a.ts", ["src/read/b.ts"]],
    ["src/read/b.ts", ["src/format/a.ts", "node:fs"]],
    ["src/read/c.ts", ["src/read/c.ts"]],
    ["src/cli/d.ts", ["src/read/b.ts"]],
    ["src/e.ts", []],
    ["src/view/f.ts", ["src/merge/g.ts"]],
  ]);
  assert.deepEqual(cycles(fake), [["src/format/a.ts", "src/read/b.ts"], ["src/read/c.ts"]]);
  assert.deepEqual(backArrows(fake), [
    "src/format/a.ts -> src/read/b.ts",
    "src/e.ts is in no layer: put it in a folder listed in LAYERS (test/layout.test.ts)",
    "src/view/f.ts -> src/merge/g.ts",
  ]);
  assert.ok(graph.size > 100, `only ${graph.size} modules found under src/: is the scan broken?`);
});

test("no import cycles between modules", () => {
  assert.deepEqual(cycles(graph), []);
});

test("no import cycles between folders", () => {
  assert.deepEqual(cycles(folderGraph(graph)), []);
});

test("imports go down the layers only (docs/ARCHITECTURE.md)", () => {
  assert.deepEqual(backArrows(graph), []);
});

test("every folder under src/ has its layer", () => {
  const folders = fs
    .readdirSync(path.join(repoRoot, "src"), { withFileTypes: true })
    .filter((entry) => entry.isDirectory())
    .map((entry) => entry.name);
  for (const folder of folders) {
    assert.ok(
      LAYERS.some((floor) => floor.some((room) => room.folder === folder)),
      `src/${folder}/ is in no layer: add it to LAYERS in test/layout.test.ts and to docs/ARCHITECTURE.md`,
    );
  }
});

/** Modules reachable from `entry` by relative imports (itself included). */
function reachable(entry: string): string[] {
  const seen = new Set<string>();
  const visit = (file: string) => {
    if (seen.has(file)) return;
    seen.add(file);
    for (const target of graph.get(file) ?? []) if (isLocal(target)) visit(target);
  };
  visit(entry);
  return [...seen];
}

const NODE_GLOBALS = /\bprocess\.|\bBuffer\.|require\(/;

/** `file` and all it reaches import nothing from Node (and, for the core, no package at all). */
function assertPure(file: string, options: { packages: boolean }): void {
  for (const module of reachable(file)) {
    for (const specifier of graph.get(module) ?? []) {
      if (isLocal(specifier)) continue;
      const allowed = options.packages && !specifier.startsWith("node:") && !builtinModules.includes(specifier);
      assert.ok(allowed, `${module} imports ${specifier} (reached from ${file})`);
    }
    assert.doesNotMatch(fs.readFileSync(path.join(repoRoot, module), "utf8"), NODE_GLOBALS, module);
  }
}

test("the core entry point imports nothing from Node and no package", () => {
  assert.ok(reachable("src/index.ts").length > 10, "the core entry point reaches too few modules");
  assertPure("src/index.ts", { packages: false });
});

test("pure folders import nothing from Node", () => {
  for (const floor of LAYERS) {
    for (const room of floor) {
      if (!room.pure) continue;
      const files = [...graph.keys()].filter(
        (file) => folderOf(file) === room.folder && !path.basename(file).startsWith("node-"),
      );
      for (const file of files) assertPure(file, { packages: true });
    }
  }
});

test("pure modules of mixed folders import nothing from Node", () => {
  for (const file of PURE) {
    assert.ok(graph.has(file), `${file} is listed in PURE but does not exist`);
    assertPure(file, { packages: true });
  }
});

/**
 * The C of native/ as modules: `journal` is journal.c (or .cc) with journal.h. A module depends on another when it
 * includes its header or calls a function the other defines (a prototype written by hand in a .c file is an arrow
 * as real as an #include: that is how journal.c and safetensors_native.c once called each other).
 */
export function nativeGraph(files: ReadonlyMap<string, string>): Graph {
  const moduleOf = (file: string) => file.replace(/\.(c|cc|h)$/, "");
  const strip = (source: string) => source.replace(/\/\*[\s\S]*?\*\/|\/\/[^\n]*/g, "");
  const defined = new Map<string, string>(); // function name -> module defining it (not static)
  const DEFINITION = /^(?!static\b|typedef\b|extern\b)[A-Za-z_][\w \t*]*?\b([A-Za-z_]\w*)\s*\([^;{}]*\)\s*\{/gm;
  for (const [file, source] of files) {
    if (file.endsWith(".h")) continue;
    for (const m of strip(source).matchAll(DEFINITION)) defined.set(m[1]!, moduleOf(file));
  }
  const graph: Graph = new Map();
  for (const [file, source] of files) {
    const from = moduleOf(file);
    const targets = graph.get(from) ?? [];
    graph.set(from, targets);
    const code = strip(source);
    const add = (to: string | undefined) => {
      if (to !== undefined && to !== from && !targets.includes(to)) targets.push(to);
    };
    for (const m of code.matchAll(/#include\s+"([^"]+)\.h"/g)) add(m[1]);
    for (const m of code.matchAll(/\b([A-Za-z_]\w*)\s*\(/g)) add(defined.get(m[1]!));
  }
  return graph;
}

function nativeSources(): Map<string, string> {
  const dir = path.join(repoRoot, "native");
  return new Map(
    fs
      .readdirSync(dir)
      .filter((name) => /\.(c|cc|h)$/.test(name))
      .map((name) => [name, fs.readFileSync(path.join(dir, name), "utf8")]),
  );
}

test("the C check finds an include cycle and a call cycle through a hand-written prototype", () => {
  const fake = new Map([
    ["a.c", '#include "b.h"\nint a_run(void) {\n  return b_run();\n}\n'],
    ["b.h", "int b_run(void);\n"],
    [
      "b.c",
      "int a_run(void); /* by hand */\nint b_run(void) {\n  return a_run();\n}\nstatic int own(void) {\n  return 0;\n}\n",
    ],
    ["c.c", '#include "b.h"\nvoid c_go(void) {\n  b_run();\n}\n'],
  ]);
  const fakeGraph = nativeGraph(fake);
  assert.deepEqual(fakeGraph.get("c"), ["b"]);
  assert.deepEqual(cycles(fakeGraph), [["a", "b"]]);
  const real = nativeGraph(nativeSources());
  assert.ok(real.size >= 8, `only ${real.size} C modules found in native/`);
  assert.ok(real.get("safetensors_native")?.includes("journal"), "the main module's calls into journal are not seen");
});

test("no cycles between the C modules of native/ (includes and calls)", () => {
  assert.deepEqual(cycles(nativeGraph(nativeSources())), []);
});
