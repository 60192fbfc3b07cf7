/**
 * An esbuild plugin for the bundles (scripts/bundle-lib.mjs): each `node:*` module the sources import is served by a
 * small generated module that takes it from `process.getBuiltinModule` (Node >= 20.16; `createRequire` elsewhere)
 * instead of importing it as ESM.
 *
 * Why: importing a builtin as ESM builds a facade that reads every export, and some exports are getters that load
 * more (node:fs's `ReadStream` loads all of node:stream): ~2.2 ms for `import ... from "node:fs"` against ~0.1 ms
 * for `process.getBuiltinModule("node:fs")` (cpu, median of 11 fresh processes). And the builtins only some
 * functions need (node:crypto 4.2 ms, node:zlib 2.4, node:fs/promises 1.8 to load) are loaded on the first call
 * of one of their functions, not at import: each function export is a forwarding function (LAZY below). Other
 * exports (objects, numbers) are read from the module when the bundle loads, which loads it then.
 *
 * The sources keep plain `import ... from "node:..."` (tsx and tsc run them as they are). A name missing here is a
 * build error, never an undefined at run time (`import-is-undefined` is an error below).
 */
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);

/** The loader every generated module uses (one copy in the bundle). */
const LOADER = `
import { createRequire } from "node:module";
let require;
export function builtin(id) {
  const get = globalThis.process?.getBuiltinModule;
  if (get) return get(id);
  require ??= createRequire(import.meta.url);
  return require(id);
}
`;

/**
 * Loaded on the first call of one of their functions. The others load with the bundle: node:fs, node:path and the
 * like are loaded at Node's start-up anyway. node:worker_threads (2.8 ms to load) is lazy too: on Node 20 and 22 the
 * addon's loading at import still loads it (`markAsUntransferable` marks every mapped window there, and loading it at
 * the first open instead would cost that open 2.8 ms); from Node 24 windows need no marking (src/io/native.ts), so
 * there only the worker pools load it.
 */
const LAZY = new Set([
  "node:crypto",
  "node:zlib",
  "node:fs/promises",
  "node:http",
  "node:net",
  "node:child_process",
  "node:worker_threads",
]);

/**
 * The facade of builtin `id`. A lazy builtin's values (worker_threads' `isMainThread`) are read when the facade runs,
 * which loads the builtin: they are only in a second facade of it (`withValues`), which the modules that import a
 * value get (see onResolve below), so that the one the eager chunk holds reads none. esbuild places a module by the
 * entries that reach its file, not by who uses what of it: merge/node-native.ts's `isMainThread` in the shared facade
 * loaded worker_threads (and node:stream) with the Node entry on every Node, where from Node 24 only the worker
 * pools need it. callgrind, whole process, `--predictable`, 2026-12-03: `process.getBuiltinModule(
 * "node:worker_threads")` costs 9.1 M instructions over `node -e 0` on Node 24 (8.1 M on 20); importing the Node entry
 * (dist/lib/node.js) 153.6 -> 144.1 M on Node 24 (`node -e 0` 93.9 M), unchanged on Node 20 (166.6 M), where the
 * addon's loading at import needs worker_threads anyway (src/io/native.ts).
 */
function facade(id, withValues) {
  const module = require(id);
  const lazy = LAZY.has(id);
  const lines = [
    `import { builtin } from "builtin-loader";`,
    lazy ? "let m;" : `const m = builtin(${JSON.stringify(id)});`,
    lazy ? `const load = () => (m ??= builtin(${JSON.stringify(id)}));` : "const load = () => m;",
    "const pick = (name) => load()[name];",
  ];
  for (const name of Object.keys(module)) {
    if (!/^[A-Za-z_$][\w$]*$/.test(name) || name === "default") continue;
    // A getter (fs.ReadStream loads node:stream, util.parseArgs its module) is read only where an import uses it:
    // unused exports are pure and dropped from the bundle.
    const descriptor = Object.getOwnPropertyDescriptor(module, name);
    if (!descriptor) continue;
    if (lazy && typeof descriptor.value === "function") {
      // `new X(...)` works too: a constructor that returns an object gives that object.
      lines.push(
        `export function ${name}(...args) { const f = load().${name}; return new.target ? new f(...args) : f.apply(this, args); }`,
      );
    } else if (!lazy || withValues) {
      lines.push(`export const ${name} = /* @__PURE__ */ pick(${JSON.stringify(name)});`);
    }
  }
  lines.push("export default /* @__PURE__ */ load();");
  return lines.join("\n");
}

/** Whether the module at `importer` (tsc's output) imports from builtin `id` a name that is not a function. */
function importsValue(importer, id) {
  if (!importer || !existsSync(importer)) return true;
  const module = require(id);
  const text = readFileSync(importer, "utf8");
  const imports = [...text.matchAll(/import\s*(\{[^}]*\}|\*\s*as\s*\w+|\w+)[^"]*?from\s*"([^"]+)"/g)];
  for (const [, what, spec] of imports) {
    if (spec !== id) continue;
    if (!what.startsWith("{")) return true; // a namespace or default import: every value
    for (const item of what.slice(1, -1).split(",")) {
      const name = item.trim().split(/\s+as\s+/)[0]; // (tsc leaves no type imports)
      if (name && typeof Object.getOwnPropertyDescriptor(module, name)?.value !== "function") return true;
    }
  }
  return false;
}

export const builtinsPlugin = {
  name: "builtins",
  setup(build) {
    build.onResolve({ filter: /^builtin-loader$/ }, () => ({ path: "loader", namespace: "builtin-loader" }));
    build.onLoad({ filter: /.*/, namespace: "builtin-loader" }, () => ({ contents: LOADER, loader: "js" }));
    build.onResolve({ filter: /^node:/ }, (args) => {
      // The loader's own import stays a real one.
      if (args.namespace === "builtin-loader") return { path: args.path, external: true };
      const values = LAZY.has(args.path) && importsValue(args.importer, args.path);
      return { path: values ? `${args.path}#values` : args.path, namespace: "builtin", sideEffects: false };
    });
    build.onLoad({ filter: /.*/, namespace: "builtin" }, (args) => {
      const [id, values] = args.path.split("#");
      return { contents: facade(id, values === "values"), loader: "js" };
    });
  },
};

/** esbuild options that make a name a facade lacks fail the build. */
export const builtinsLogOverride = { "import-is-undefined": "error" };
