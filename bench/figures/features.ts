/** Feature detection on the built package, for figures whose API is still being added. */
import * as fs from "node:fs";
import { fileURLToPath } from "node:url";
import { PACKAGE_NAME } from "../spec.js";

/**
 * Whether the package's `loadFile` takes `{populate: true}`, read from the type declarations it ships next to the
 * entry point Node resolves (an unknown option would be ignored silently at run time, so the call cannot tell).
 */
export function loadFileHasPopulate(): boolean {
  const root = new URL(".", import.meta.resolve(`${PACKAGE_NAME}/package.json`));
  // The entry re-exports the file API from read/node-files (the CLI imports that module without the entry).
  return ["dist/node.d.ts", "dist/read/node-files.d.ts"].some((file) => {
    try {
      return /\bpopulate\?\s*:/.test(fs.readFileSync(fileURLToPath(new URL(file, root)), "utf8"));
    } catch {
      return false;
    }
  });
}
