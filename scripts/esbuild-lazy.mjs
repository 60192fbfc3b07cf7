/**
 * An esbuild plugin for the Node bundle of the library (scripts/bundle-lib.mjs): the subsystems most programs never
 * call (GGUF, pickle, merges and LoRA, integrity, WebGPU, in-place edits) are compiled on their first call, not at
 * import. Each module of those folders that an entry (dist/index.js, dist/node.js) imports is replaced by a facade:
 *
 * - a function export becomes a function of the same name that loads the real module (its own entry, a chunk
 *   `lazy-<folder>.js` beside the others) with a synchronous `require()` on the first call, then forwards;
 * - a class becomes a thin stand-in of the same name (thinModule below): `new X(...)` loads the real class and returns
 *   its instance, static methods forward, and the real class's prototype is re-parented onto the stand-in's when its
 *   module runs, so that `instanceof X` holds for every instance however it was made. (A user's `class Y extends X`
 *   would get the real class's instance, not a Y: these are handles the library makes, not classes to extend.)
 * - a primitive constant is written as its value;
 * - another constant (a table, a default options object) is imported from the module of the folder that declares it,
 *   which stays in the eager bundle (it must be the one object the folder's functions use).
 *
 * `require()` of an ES module is synchronous and shares the module map with `import` (one `Tensor`, one
 * `SafetensorError`, whichever way a chunk was loaded) on every Node the package supports (20.19+, 22.12+, 24, 26),
 * in Bun and in Deno (checked on each). Sync functions stay sync: no public signature changes, and the types are the
 * compiled sources' (dist/*.d.ts), untouched by this.
 *
 * Why: V8 compiles every byte a process loads (a pre-parse of each function at least: wrapping a module in a function
 * that is never called saves little), and those folders were 60% of the ~570 KB the Node entry loaded. Measured
 * 2026-12-02 07:44 UTC, Node 20.20.2, `NODE_EXTRA_CA_CERTS` unset, 21 fresh processes per side, round-robin, load
 * average ~6 on 2 cores (so about twice a quiet machine's figures), `await import()` timed in the process (wall over
 * `node -e 0` in brackets; an empty module costs 4.3 ms, +10.0):
 *
 *   Node entry  29.0 ms (+34.3) before, 20.1 ms (+24.9) with this: 7 files / 570 KB loaded before, 3 / 275 KB now
 *   core        15.6 ms (+23.6) before, 10.4 ms (+18.0) with this: 5 files / 347 KB before, 2 / 174 KB now
 *
 * `node scripts/probe-import.mjs` measures the same from the packed tarball (bench/NODES.md, "Import").
 *
 * The classes' stand-ins (EditHandle, ShardedEditHandle, GgufFile, AsyncGgufFile, WeightCache) took their modules and
 * what those import out of the eager bundle: 275 KB -> 217 KB (core chunk 173 -> 151 KB, Node chunk 102 -> 66 KB; the
 * in-place edits' journal writer, regions and proofs now load with their first call). callgrind, instructions of a
 * whole process, `--predictable` (V8 on one thread, deterministic: the same count run after run), 2026-12-02, Node 20
 * / 24: importing the core 165.0 / 126.5 M -> 161.6 / 123.2 M, the Node entry 228.5 / 151.9 M -> 218.9 / 142.4 M,
 * the Node entry and a first loadFile of the bench's checkpoint 229.0 / 227.4 M -> 219.4 / 216.4 M (`node -e 0`
 * 93.2 / 94.1 M).
 *
 * The browser build of the core (dist/lib/browser) does not use this: a browser has no synchronous loader, so it
 * gets the whole core eagerly (and bundlers drop what a page does not use).
 */
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { pathToFileURL } from "node:url";

/** The folders loaded on first use; the others (format, io, read, codecs, slice, shards, remote, rank) are eager. */
export const LAZY_FOLDERS = ["gguf", "pickle", "merge", "integrity", "gpu", "edit"];

const LOADER = `
import { createRequire } from "node:module";
let require;
export function lazyModule(file, member) {
  let module;
  return () => (module ??= (require ??= createRequire(import.meta.url))(file)[member]);
}
`;

const isClass = (value) => typeof value === "function" && /^class[\s{]/.test(Function.prototype.toString.call(value));

/**
 * @param {{ root: string, entries: string[] }} options `entries`: the entry modules (absolute) whose imports of the
 *   lazy folders get facades. Returns the plugin and the extra entry points (name → module) the lazy chunks need.
 */
export async function lazyPlugin({ root, entries }) {
  const dist = join(root, "dist");
  const entrySet = new Set(entries.map((e) => resolve(e)));
  const lazyEntries = {};
  const facades = new Map();
  const folderOf = (path) => relative(dist, path).split(/[\\/]/)[0];

  const folderModules = new Map(); // folder → the modules its lazy chunk exports, each as a namespace `m<i>`
  const thinClasses = new Map(); // folder → [{ key, origin, member, statics }]: the folder's classes (see thinModule)
  const classOrigins = new Map(); // a module that declares such a class → [{ folder, key }]

  /** The member `m<i>` of its folder's lazy chunk that exports the module at `path` (added when it is not there). */
  function memberOf(path) {
    const folder = folderOf(path);
    const modules = folderModules.get(folder) ?? folderModules.set(folder, []).get(folder);
    const at = modules.indexOf(path);
    return `m${at >= 0 ? at : modules.push(path) - 1}`;
  }

  async function facade(path, names) {
    const folder = folderOf(path);
    const member = memberOf(path);
    const name = `lazy-${folder}`;
    lazyEntries[name] = `lazy-entry:${folder}`;
    const module = await import(pathToFileURL(path).href);
    const siblings = readdirSync(dirname(path))
      .filter((f) => f.endsWith(".js"))
      .map((f) => join(dirname(path), f));
    const lines = [
      `import { lazyModule } from "lazy-loader";`,
      `const load = lazyModule("./${name}.js", ${JSON.stringify(member)});`,
    ];
    for (const key of names) {
      const value = module[key];
      if (typeof value === "function" && !isClass(value)) {
        lines.push(`export function ${key}(...args) { return load().${key}.apply(this, args); }`);
        continue;
      }
      // The module that declares it (tsc's output: `export const X =`, `export class X`).
      const declares = new RegExp(`^export (const|let|var|class) ${key}\\b`, "m");
      let origin;
      for (const file of siblings) {
        if (declares.test(readFileSync(file, "utf8")) && (await import(pathToFileURL(file).href))[key] === value) {
          origin = file;
          break;
        }
      }
      if (!origin) throw new Error(`${path}: no module of its folder declares ${key}`);
      if (typeof value === "number" || typeof value === "string" || typeof value === "boolean") {
        // A primitive constant: its value, so that its module need not load with the bundle.
        lines.push(`export const ${key} = ${JSON.stringify(value)};`);
        continue;
      }
      if (isClass(value) && Object.getPrototypeOf(value) === Function.prototype) {
        // A class: a thin stand-in (thinModule), so that its module need not load with the bundle either.
        const classes = thinClasses.get(folder) ?? thinClasses.set(folder, []).get(folder);
        if (!classes.some((c) => c.key === key)) {
          const statics = Object.getOwnPropertyNames(value).filter((n) => !["length", "name", "prototype"].includes(n));
          for (const n of statics) {
            if (typeof Object.getOwnPropertyDescriptor(value, n).value !== "function") {
              throw new Error(
                `${origin}: ${key}.${n} is a static that is not a method (thinModule forwards methods only)`,
              );
            }
          }
          classes.push({ key, origin, member: memberOf(origin), statics });
          const declared = classOrigins.get(origin) ?? classOrigins.set(origin, []).get(origin);
          declared.push({ folder, key });
        }
        lines.push(`export { ${key} } from "lazy-thin:${folder}";`);
        continue;
      }
      lines.push(`export { ${key} } from ${JSON.stringify(origin)};`);
    }
    return lines.join("\n");
  }

  // The names the entries import from the lazy folders (tsc's output: `export { a, b as c } from "./x/y.js";`), so
  // that a facade exports those only (an internal constant would pull its module into the eager bundle).
  const imported = new Map();
  for (const entry of entrySet) {
    const text = readFileSync(entry, "utf8");
    for (const [, list, spec] of text.matchAll(/(?:export|import) \{([^}]*)\} from "(\.\.?\/[^"]+)"/g)) {
      const path = resolve(dirname(entry), spec);
      if (!LAZY_FOLDERS.includes(folderOf(path))) continue;
      const names = imported.get(path) ?? imported.set(path, new Set()).get(path);
      for (const item of list.split(",")) if (item.trim()) names.add(item.trim().split(/\s+as\s+/)[0]);
    }
    if (/^(export|import) \*/m.test(text.replace(/^export \* from "\.\/index\.js";$/m, ""))) {
      throw new Error(`${entry}: a star import or export the lazy facades cannot follow`);
    }
  }
  for (const [path, names] of imported) facades.set(path, await facade(path, [...names]));

  /**
   * The thin stand-ins of a folder's classes, in the eager bundle: `new X(...)` constructs the real class (loading the
   * folder's chunk) and returns its instance, a static method forwards to the real one. The real class's prototype is
   * re-parented onto the stand-in's when its module runs (see the onLoad of its file below), so that its instances,
   * however they were made (by the folder's own functions mostly), are `instanceof` the exported class.
   */
  function thinModule(folder) {
    const lines = [`import { lazyModule } from "lazy-loader";`];
    for (const [i, { key, member, statics }] of thinClasses.get(folder).entries()) {
      lines.push(`const load${i} = lazyModule("./lazy-${folder}.js", ${JSON.stringify(member)});`);
      lines.push(`export class ${key} {`);
      lines.push(`  constructor(...args) { return new (load${i}().${key})(...args); }`);
      for (const n of statics) lines.push(`  static ${n}(...args) { return load${i}().${key}.${n}(...args); }`);
      lines.push("}");
    }
    return lines.join("\n");
  }

  const plugin = {
    name: "lazy",
    setup(build) {
      build.onResolve({ filter: /^lazy-thin:/ }, (args) => ({ path: args.path.slice(10), namespace: "lazy-thin" }));
      build.onLoad({ filter: /.*/, namespace: "lazy-thin" }, (args) => ({
        contents: thinModule(args.path),
        loader: "js",
        resolveDir: dist,
      }));
      // A module that declares a class with a stand-in: its prototype joins the stand-in's chain when it runs.
      build.onLoad({ filter: /\.js$/, namespace: "file" }, (args) => {
        const declared = classOrigins.get(args.path);
        if (!declared) return undefined;
        const link = declared.flatMap(({ folder, key }, i) => [
          `import { ${key} as Thin${i}$ } from "lazy-thin:${folder}";`,
          `Object.setPrototypeOf(Thin${i}$.prototype, Object.getPrototypeOf(${key}.prototype));`,
          `Object.setPrototypeOf(${key}.prototype, Thin${i}$.prototype);`,
          // \`handle.constructor\` is the exported class, as it was (new handle.constructor(...) makes a real one).
          `Object.defineProperty(${key}.prototype, "constructor", { value: Thin${i}$, writable: true, configurable: true });`,
        ]);
        return {
          contents: `${readFileSync(args.path, "utf8")}\n${link.join("\n")}\n`,
          loader: "js",
          resolveDir: dirname(args.path),
        };
      });
      build.onResolve({ filter: /^lazy-loader$/ }, () => ({ path: "loader", namespace: "lazy-loader" }));
      build.onLoad({ filter: /.*/, namespace: "lazy-loader" }, () => ({
        contents: LOADER,
        loader: "js",
        resolveDir: dist,
      }));
      build.onResolve({ filter: /^lazy-entry:/ }, (args) => ({ path: args.path.slice(11), namespace: "lazy-entry" }));
      // A lazy chunk: the folder's modules the facades load, each as a namespace. The bare imports of the entries
      // are dropped (they have no side effects, and esbuild says so: silenced below), but they make esbuild count
      // the eager modules as reached from every lazy chunk too, so that it splits them into two chunks (the core's
      // and the Node entry's) rather than one per set of lazy chunks that use them: 3 files at import, not 16.
      build.onLoad({ filter: /.*/, namespace: "lazy-entry" }, (args) => ({
        contents: folderModules
          .get(args.path)
          .map((module, i) => `export * as m${i} from ${JSON.stringify(module)};`)
          .concat(entries.map((entry) => `import ${JSON.stringify(resolve(entry))};`))
          .join("\n"),
        loader: "js",
        resolveDir: join(dist, args.path),
      }));
      build.onResolve({ filter: /^\.\.?\// }, (args) => {
        if (args.kind === "entry-point" || !entrySet.has(resolve(args.importer))) return undefined;
        const path = resolve(args.resolveDir, args.path);
        return facades.has(path) ? { path, namespace: "lazy-facade" } : undefined;
      });
      build.onLoad({ filter: /.*/, namespace: "lazy-facade" }, (args) => ({
        contents: facades.get(args.path),
        loader: "js",
        resolveDir: dirname(args.path),
      }));
    },
  };
  return { plugin, lazyEntries, logOverride: { "ignored-bare-import": "silent" } };
}

/**
 * The files a process loads when it imports `entry` (its static imports, followed): the build fails past `most`, so
 * that a change in how esbuild splits does not quietly make the import cost more again.
 */
export function checkEagerFiles(entry, most) {
  const seen = new Set();
  const stack = [resolve(entry)];
  while (stack.length > 0) {
    const file = stack.pop();
    if (seen.has(file)) continue;
    seen.add(file);
    for (const [, spec] of readFileSync(file, "utf8").matchAll(
      /(?:^|[;}])\s*(?:import|export)\s*(?:[\w*$\s{},]*from\s*)?"(\.\/[^"]+)"/g,
    )) {
      stack.push(join(dirname(file), spec));
    }
  }
  if (seen.size > most) {
    throw new Error(`importing ${entry} loads ${seen.size} files (at most ${most}):\n${[...seen].join("\n")}`);
  }
  return seen;
}
