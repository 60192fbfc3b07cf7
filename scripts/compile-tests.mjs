#!/usr/bin/env node
/**
 * The suite as plain JavaScript: every TypeScript (and .mjs) module of the folders tests import from, transformed by
 * esbuild one file at a time into a folder under test-artifacts/ (ignored by git), the folders mirrored so that
 * relative imports still meet. `npm test` and `npm run test:fast` run the compiled tests (scripts/run-tests.mjs),
 * compiling into a folder of their own each run (1-3 s), so they never run an older compile than the sources.
 *
 * Why: `node --import tsx` costs ~0.45 s of CPU before a file runs where plain node costs ~0.1 s (tsx's hooks off
 * the main thread, then each module transformed as it is imported), for each of the ~100 test files and each child
 * process they start from the sources (2026-12-03, 2-core VM, Node 20).
 *
 * Each module's `import.meta.url`, `.dirname` and `.filename` are replaced by its source's, as tsx leaves them: the
 * fixtures, the addon (build/Release), package.json and the worker threads' sources are found where they are in the
 * checkout, and a test that runs its own file again in a child runs the source. Inline source maps (node runs the
 * compiled tests with --enable-source-maps) give errors the source's file names and lines.
 *
 * But for the modules that start worker threads from a file beside them (OWN_LOCATION): they keep their compiled
 * location, so that they find the compiled worker beside them and start it as it is. From the source they found the
 * worker's .ts, and each worker registered tsx first: ~0.85 s of CPU for a merge's pool of two (test/merge.test.ts).
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { transform } from "esbuild";

const root = join(fileURLToPath(import.meta.url), "..", "..");

/** Where the compiled modules' folders go (ignored by git). */
export const ARTIFACTS = join(root, "test-artifacts");
/** The folders compiled: the tests, the sources they test, and the bench and scripts modules some tests import. */
const FOLDERS = ["src", "test", "bench", "scripts"];
/** Not compiled: data, and build output. */
const SKIPPED = new Set(["test/fixtures", "bench/out"]);
const LOADERS = { ".ts": "ts", ".mts": "ts", ".mjs": "js" };
/** Modules whose `import.meta` stays their compiled file's: they look for their worker threads' files beside them. */
const OWN_LOCATION = new Set(["src/merge/node-pool.ts", "src/gguf/node-pool.ts"]);

function sources(folder) {
  const found = [];
  for (const entry of readdirSync(join(root, folder), { withFileTypes: true })) {
    const name = `${folder}/${entry.name}`;
    if (entry.isDirectory()) {
      if (!SKIPPED.has(name)) found.push(...sources(name));
    } else if (/\.(m?ts|mjs)$/.test(name) && !name.endsWith(".d.ts")) {
      found.push(name);
    }
  }
  return found;
}

/** The compiled file in `dir` of a source relative to the checkout (`test/a.test.ts` → DIR/test/a.test.js). */
export function compiledPath(dir, source) {
  return join(dir, source.replace(/\.ts$/, ".js").replace(/\.mts$/, ".mjs"));
}

/** The source of a file compiled into `dir` or of a link to one (absolute paths), or undefined for other files. */
export function sourceOf(dir, file) {
  const name = relative(dir, existsSync(file) ? realpathSync(file) : file);
  return name.startsWith("..") || !name.endsWith(".js") ? undefined : join(root, name.replace(/\.js$/, ".ts"));
}

/** Compile every module into `dir`, afresh (what it held is removed first); returns how many were compiled. */
export async function compileTests(dir) {
  const { compilerOptions } = JSON.parse(readFileSync(join(root, "tsconfig.json"), "utf8"));
  rmSync(dir, { recursive: true, force: true });
  const files = FOLDERS.flatMap(sources);
  await Promise.all(
    files.map(async (name) => {
      const file = join(root, name);
      const ext = name.slice(name.lastIndexOf("."));
      const { code } = await transform(readFileSync(file, "utf8"), {
        loader: LOADERS[ext],
        format: "esm",
        target: `node${process.versions.node}`,
        tsconfigRaw: { compilerOptions },
        sourcemap: "inline",
        sourcesContent: false, // node reads the source file when it shows a line: half the size (9.4 -> 5.3 MB)
        sourcefile: file,
        define: OWN_LOCATION.has(name)
          ? {}
          : {
              "import.meta.url": JSON.stringify(pathToFileURL(file).href),
              "import.meta.dirname": JSON.stringify(dirname(file)),
              "import.meta.filename": JSON.stringify(file),
            },
      });
      const out = compiledPath(dir, name);
      mkdirSync(dirname(out), { recursive: true });
      writeFileSync(out, code);
    }),
  );
  return files.length;
}

// By hand: `node scripts/compile-tests.mjs [DIR]` (test-artifacts/js by default).
if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const dir = process.argv[2] ?? join(ARTIFACTS, "js");
  const count = await compileTests(dir);
  console.log(`compiled ${count} modules into ${relative(process.cwd(), dir)}`);
}
