#!/usr/bin/env node
// An independent check of the headline on every tested Node, outside the bench's harness: the packed tarball
// installed with --ignore-scripts into a scratch project (as a user whose npm runs no install scripts gets it), then,
// in fresh processes, `loadFile(FILE)` there against the reference's `safetensors.torch.load_file(FILE)`, round-robin
// (one run of each Node, then the reference, then again). Each side imports its library first, collects garbage
// (`gc()` under --expose-gc, `gc.collect()`: what the bench's workers do before a timed call) and times only the call
// (performance.now / perf_counter_ns); RSS growth is the resident set after minus before (VmRSS). Each Node's process
// also reports the backend `doctor` would name (mmap when the prebuilt addon loaded).
//
// Why the collection: the first minor GC of a Node process comes after ~0.6 MB of young allocations, and importing
// the package and opening the file once make most of that, so without it the process's first scavenge (1-3 ms on
// this VM) lands inside the timed call on some Nodes and just before it on others, moved by a few KiB of allocation
// anywhere before (seen with --trace-gc). `--no-gc` times without the collection.
//
//   node scripts/probe-load.mjs FILE [--runs 7] [--majors 20,22,24,26] [--tarball PATH] [--python PATH] [--no-gc]
//
// Run it under the bench lock on a shared machine: it is a timing. The verdict per Node is the bench's load_views
// goal: reference median / ours median >= 5 and RSS growth <= 2 MiB. Exit status 1 when a Node misses it.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { root } from "./native-tools.mjs";
import { NODE_BUILDS, nodeBuild } from "./node-builds.mjs";
import { installTarball, median, must as mustOf, option, readLoad } from "./probe-tools.mjs";

const file = process.argv[2];
if (!file || file.startsWith("--") || !existsSync(file)) {
  console.error(
    "usage: node scripts/probe-load.mjs FILE [--runs N] [--majors 20,22,24,26] [--tarball PATH] [--python PATH] [--no-gc]",
  );
  process.exit(2);
}
const runs = Number(option("--runs", "7"));
const majors = option("--majors", NODE_BUILDS.map((b) => b.major).join(","))
  .split(",")
  .map(Number);
const python = option("--python", process.env.SAFETENSORS_REF_PYTHON ?? join(root, ".venv-ref", "bin", "python"));

const must = (r, what) => mustOf(r, what, "probe-load");
const collect = !process.argv.includes("--no-gc");
const gcFlag = collect ? ["--expose-gc"] : [];

const scratch = mkdtempSync(join(tmpdir(), "st-probe-"));
try {
  const app = installTarball(scratch, option("--tarball", undefined), "probe-load");
  writeFileSync(
    join(app, "ours.mjs"),
    `import { readFileSync } from "node:fs";
import { loadFile, openFile } from "safetensors-ts";
const rss = () => Number(/VmRSS:\\s+(\\d+)/.exec(readFileSync("/proc/self/status", "utf8"))[1]) / 1024;
const path = process.argv[2];
const probe = openFile(path);
const backend = probe.backend;
probe.close();
globalThis.gc?.();
const before = rss();
const t0 = performance.now();
const tensors = loadFile(path);
const ms = performance.now() - t0;
const after = rss();
console.log(JSON.stringify({ ms, rss: after - before, tensors: tensors.size, backend, version: process.version }));
`,
  );
  writeFileSync(
    join(app, "ref.py"),
    `import json, re, sys, time
import torch
from safetensors.torch import load_file
def rss():
    return int(re.search(r"VmRSS:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) / 1024
if sys.argv[2:] != ["--no-gc"]:
    import gc
    gc.collect()
before = rss()
t0 = time.perf_counter_ns()
tensors = load_file(sys.argv[1])
ms = (time.perf_counter_ns() - t0) / 1e6
after = rss()
print(json.dumps({"ms": ms, "rss": after - before, "tensors": len(tensors)}))
`,
  );

  const sides = [];
  for (const major of majors) {
    const own = Number(process.versions.node.split(".")[0]) === major && process.arch === "x64";
    const build = own ? { bin: process.execPath } : nodeBuild(major, "x64", { install: false });
    if (build.missing) console.log(`probe-load: SKIPPED Node ${major}: ${build.missing}`);
    else
      sides.push({
        label: `node ${major}`,
        argv: [build.bin, ...gcFlag, join(app, "ours.mjs"), file],
        major,
        samples: [],
      });
  }
  const reference = existsSync(python)
    ? { label: "reference", argv: [python, join(app, "ref.py"), file, ...(collect ? [] : ["--no-gc"])], samples: [] }
    : null;
  if (!reference) console.log(`probe-load: no reference Python at ${python} (--python): no ratios`);
  const all = reference ? [...sides, reference] : sides;
  for (let run = -1; run < runs; run++) {
    for (const side of all) {
      const out = must(spawnSync(side.argv[0], side.argv.slice(1), { cwd: app, encoding: "utf8" }), side.label);
      const sample = JSON.parse(out.trim().split("\n").at(-1));
      if (run >= 0) side.samples.push(sample); // run -1: the warm-up (page cache, first start), not counted
    }
  }
  const fmt = (ms) => (ms < 10 ? ms.toFixed(3) : ms.toFixed(1));
  const refMs = reference ? median(reference.samples.map((s) => s.ms)) : null;
  console.log(
    `probe-load: ${file}, ${runs} runs per side, round-robin, ${collect ? "garbage collected" : "no collection"} before the call; load ${readLoad()}`,
  );
  console.log("side        version    backend  tensors  median ms (min-max)          RSS growth MiB  x ref  goal");
  let missed = 0;
  for (const side of all) {
    const ms = side.samples.map((s) => s.ms);
    const med = median(ms);
    const rssGrowth = median(side.samples.map((s) => s.rss));
    const first = side.samples[0];
    const ratio = side === reference || refMs === null ? null : refMs / med;
    const ok = ratio === null ? null : ratio >= 5 && rssGrowth <= 2;
    if (ok === false) missed++;
    console.log(
      [
        side.label.padEnd(11),
        (first.version ?? "python").padEnd(10),
        (first.backend ?? "-").padEnd(8),
        String(first.tensors).padEnd(8),
        `${fmt(med)} (${fmt(Math.min(...ms))}-${fmt(Math.max(...ms))})`.padEnd(28),
        rssGrowth.toFixed(1).padEnd(15),
        (ratio === null ? "-" : `${ratio.toFixed(1)}x`).padEnd(6),
        ok === null ? "" : ok ? "holds (>= 5x, <= 2 MiB)" : "MISSED (>= 5x, <= 2 MiB)",
      ].join(" "),
    );
  }
  process.exitCode = missed ? 1 : 0;
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
