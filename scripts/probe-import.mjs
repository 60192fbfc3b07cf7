#!/usr/bin/env node
// What importing the package costs a user's process, outside the bench's harness: the packed tarball installed with
// --ignore-scripts into a scratch project, then fresh processes, round-robin: `node -e 0`, an empty ES module
// imported (what any `await import()` costs: Node's ES module loader), `safetensors-ts` (the Node entry) and
// `safetensors-ts/core`. Each process is timed from spawn to exit (wall), and reports the `await import()` alone
// (performance.now in the process). NODE_EXTRA_CA_CERTS is unset for every child (it adds ~50 ms of start-up here).
//
//   node scripts/probe-import.mjs [--runs 21] [--majors 20,22,24,26] [--tarball PATH]
//
// The goals (issue 18): the Node entry ≤ 15 ms and the core ≤ 10 ms over `node -e 0` (wall medians). Run it under
// the bench lock on a shared machine: it is a timing. Exit status 1 when a goal is missed.
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { nodeBuild } from "./node-builds.mjs";
import { installTarball, median, must as mustOf, option, readLoad } from "./probe-tools.mjs";

const runs = Number(option("--runs", "21"));
const majors = option("--majors", process.versions.node.split(".")[0]).split(",").map(Number);
const GOALS = { "safetensors-ts": 15, "safetensors-ts/core": 10 };

const must = (r, what) => mustOf(r, what, "probe-import");

const scratch = mkdtempSync(join(tmpdir(), "st-import-"));
try {
  const app = installTarball(scratch, option("--tarball", undefined), "probe-import");
  writeFileSync(join(app, "empty.mjs"), "export {};\n");
  const env = { ...process.env };
  delete env.NODE_EXTRA_CA_CERTS;
  const timed = (spec) =>
    `const t = performance.now(); await import(${JSON.stringify(spec)}); console.log(performance.now() - t);`;
  const modules = [null, "./empty.mjs", "safetensors-ts", "safetensors-ts/core"];
  let missed = 0;
  console.log(`probe-import: ${runs} fresh processes per side, round-robin; load ${readLoad()}`);
  for (const major of majors) {
    const own = Number(process.versions.node.split(".")[0]) === major;
    const build = own ? { bin: process.execPath } : nodeBuild(major, "x64", { install: false });
    if (build.missing) {
      console.log(`probe-import: SKIPPED Node ${major}: ${build.missing}`);
      continue;
    }
    const sides = modules.map((spec) => ({ spec, wall: [], inside: [] }));
    for (let run = -1; run < runs; run++) {
      for (const side of sides) {
        const args = side.spec === null ? ["-e", "0"] : ["--input-type=module", "-e", timed(side.spec)];
        const t0 = process.hrtime.bigint();
        const out = must(spawnSync(build.bin, args, { cwd: app, env, encoding: "utf8" }), side.spec ?? "node -e 0");
        const wall = Number(process.hrtime.bigint() - t0) / 1e6;
        if (run < 0) continue; // the warm-up round (page cache), not counted
        side.wall.push(wall);
        if (side.spec !== null) side.inside.push(Number(out.trim().split("\n").at(-1)));
      }
    }
    const bare = median(sides[0].wall);
    const version = spawnSync(build.bin, ["--version"], { encoding: "utf8" }).stdout.trim();
    console.log(`Node ${version}: node -e 0 ${bare.toFixed(1)} ms (wall median)`);
    for (const side of sides.slice(1)) {
      const over = median(side.wall) - bare;
      const goal = GOALS[side.spec];
      if (goal !== undefined && over > goal) missed++;
      console.log(
        [
          `  ${side.spec}`.padEnd(24),
          `wall ${median(side.wall).toFixed(1)} ms`.padEnd(16),
          `+${over.toFixed(1)} ms over node -e 0`.padEnd(26),
          `import() alone ${median(side.inside).toFixed(1)} ms`.padEnd(24),
          goal === undefined ? "" : over <= goal ? `holds (<= ${goal} ms)` : `MISSED (<= ${goal} ms)`,
        ].join(" "),
      );
    }
  }
  process.exitCode = missed ? 1 : 0;
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
