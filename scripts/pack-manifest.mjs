#!/usr/bin/env node
// The package.json that ships has no "prepare" script. A checkout needs it (`npm install` builds the addon and dist/
// there), but npm 11 lists every lifecycle script of an installed package, "prepare" included, in a warning that asks
// the user to approve it (`npm warn install-scripts ... not yet covered by allowScripts`), though npm never runs
// "prepare" for a package installed from a tarball. So the "prepack" step takes it out of package.json (and builds
// dist/ itself: npm reads the scripts again after "prepack", and runs no "prepare" then) and
// "postpack" puts the file back as it was (kept meanwhile in package.json.packing; a pack that failed half-way is
// undone by the next run of either step).
//
//   node scripts/pack-manifest.mjs strip     (prepack)
//   node scripts/pack-manifest.mjs restore   (postpack)
import { existsSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { root } from "./native-tools.mjs";

const manifest = join(root, "package.json");
const kept = join(root, "package.json.packing");

function restore() {
  if (existsSync(kept)) renameSync(kept, manifest);
}

const command = process.argv[2];
if (command === "restore") {
  restore();
} else if (command === "strip") {
  restore();
  const text = readFileSync(manifest, "utf8");
  const json = JSON.parse(text);
  if (json.scripts?.prepare !== undefined) {
    writeFileSync(kept, text);
    delete json.scripts.prepare;
    writeFileSync(manifest, `${JSON.stringify(json, null, 2)}\n`);
  }
} else {
  console.error("usage: node scripts/pack-manifest.mjs strip|restore");
  process.exitCode = 2;
}
