/**
 * What a test's child process runs of the checkout's modules: under `npm test` their compiled twins
 * (scripts/compile-tests.mjs, in the folder the runner names in SAFETENSORS_TEST_JS) with plain node, otherwise the
 * sources through tsx. A child through tsx took ~0.45 s of CPU more to start than plain node (2026-12-03, 2-core VM).
 */
import { existsSync } from "node:fs";
import * as path from "node:path";
import { pathToFileURL } from "node:url";
import { repoRoot } from "./corpus.js";

const compiledRoot = process.env.SAFETENSORS_TEST_JS || undefined;

/** Whether this process runs compiled modules (then its children and worker threads run them too). */
export const runsCompiled = compiledRoot !== undefined;

/** node's arguments before a child's script or module: tsx's loader when it runs the sources, else none. */
export const loaderArgs: readonly string[] = runsCompiled ? [] : ["--import", "tsx"];

/** The file a child runs or imports for the module `source` (a .ts path in the checkout): its twin when compiled. */
export function modulePath(source: string): string {
  if (compiledRoot === undefined) return source;
  const twin = path.join(compiledRoot, path.relative(repoRoot, path.resolve(source)).replace(/\.ts$/, ".js"));
  // A missing twin is a module outside the compiled folders: plain node cannot run its source.
  if (!existsSync(twin)) throw new Error(`${source} has no compiled twin in ${compiledRoot}`);
  return twin;
}

/** modulePath's file as a URL, for a child's `import()`. */
export function moduleUrl(source: string): string {
  return pathToFileURL(modulePath(source)).href;
}
