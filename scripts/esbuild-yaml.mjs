/**
 * An esbuild plugin for the CLI bundle (scripts/bundle-cli.mjs): `import("yaml")` is bundled, from the package's ESM
 * build (`yaml/browser/index.js`, the same parser without Node's warning hooks), into a chunk of its own that
 * `merge-models` loads. The package is ~100 modules: loading them took 102-115 ms on the 2-vCPU VM, one bundled file
 * 14.5-17.3 ms (a fresh Node 20 process, `import` then the first parse of the bench's linear.yml, 2026-12-03).
 * Every other package stays external.
 */

import { createRequire } from "node:module";
import * as path from "node:path";

const require = createRequire(import.meta.url);

export const yamlPlugin = {
  name: "bundle-yaml",
  setup(build) {
    const entry = path.join(path.dirname(require.resolve("yaml/package.json")), "browser", "index.js");
    build.onResolve({ filter: /^yaml$/ }, () => ({ path: entry }));
  },
};
