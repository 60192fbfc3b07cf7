#!/usr/bin/env node
// The package on every tested Node other than the one running the whole suite: for each build of
// scripts/node-builds.mjs (x64 natively, arm64 under qemu-user through binfmt_misc), the packed-package test (the
// tarball installed with --ignore-scripts typechecks and runs the README example, doctor reports mmap and uncounted
// views) and a core subset of the suite: reading the corpus, slicing, writing, shards, an edit with recovery, mapped
// views, and the CLI's inspect/validate/hash over the corpus. The tarball is packed once and shared.
//
// What cannot run here is skipped with one line saying why (a Node build not installed, no qemu, no binfmt_misc);
// a test that fails makes the exit status 1. Run by .ci/run after `npm test`.
//
//   node scripts/node-matrix.mjs [--arch x64|arm64|all] [--majors 22,24,26] [--doctor-arm64 MAJORS]
//
// Under emulation (10-50x slower than the host on a loaded 2-vCPU machine) the newest arm64 Node runs the
// packed-package test (its tsc on the host's Node) and the mapped-view tests; the others (--doctor-arm64, default:
// all but the newest) run doctor on the checkout with the tarball's binaries, which must report the mmap backend and
// uncounted views: their per-ABI binary loads and is the one used.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { root } from "./native-tools.mjs";
import { NODE_BUILDS, nodeBuild } from "./node-builds.mjs";

const CORE = [
  "test/package.test.ts",
  "test/corpus.test.ts",
  "test/slice.test.ts",
  "test/serialize.test.ts",
  "test/save-views.test.ts",
  "test/shards.test.ts",
  "test/interrupted-edit.test.ts",
  "test/mmap-views.test.ts",
  "test/cli.test.ts",
];
const ARM64 = ["test/package.test.ts", "test/mmap-views.test.ts"];
const QEMU_PREFIX = "/usr/aarch64-linux-gnu";

function option(name, fallback) {
  const at = process.argv.indexOf(name);
  return at >= 0 && process.argv[at + 1] !== undefined ? process.argv[at + 1] : fallback;
}

const arches = option("--arch", "all") === "all" ? ["x64", "arm64"] : [option("--arch", "x64")];
const majors = option("--majors", NODE_BUILDS.map((b) => b.major).join(","))
  .split(",")
  .map(Number);
const newest = Math.max(...majors);
const doctorArm64 = option("--doctor-arm64", majors.filter((m) => m !== newest).join(","))
  .split(",")
  .filter(Boolean)
  .map(Number);

function log(line) {
  console.log(`node-matrix: ${line}`);
}

/** Whether arm64 binaries run here: binfmt_misc with qemu-aarch64, registered from Debian's file when missing. */
function arm64Runs(node) {
  const tryRun = () =>
    spawnSync(node, ["-p", "process.arch"], { encoding: "utf8", env: { ...process.env, QEMU_LD_PREFIX: QEMU_PREFIX } });
  let r = tryRun();
  if (r.stdout?.trim() === "arm64") return undefined;
  const conf = "/usr/lib/binfmt.d/qemu-aarch64.conf";
  if (!existsSync(conf)) return "qemu-user-static is not installed (no /usr/lib/binfmt.d/qemu-aarch64.conf)";
  const misc = "/proc/sys/fs/binfmt_misc";
  if (!existsSync(join(misc, "register"))) spawnSync("mount", ["-t", "binfmt_misc", "binfmt_misc", misc]);
  if (!existsSync(join(misc, "qemu-aarch64"))) {
    try {
      writeFileSync(join(misc, "register"), readFileSync(conf));
    } catch (error) {
      return `cannot register qemu-aarch64 with binfmt_misc: ${error.message}`;
    }
  }
  r = tryRun();
  return r.stdout?.trim() === "arm64" ? undefined : `arm64 node does not run: ${r.error?.message ?? r.stderr}`;
}

/** esbuild's binary for arm64 (tsx and the browser-bundle test load esbuild), the same version as the x64 one. */
function esbuildArm64() {
  const dir = join(root, "node_modules", "@esbuild", "linux-arm64");
  if (existsSync(join(dir, "bin", "esbuild"))) return undefined;
  const version = JSON.parse(readFileSync(join(root, "node_modules", "esbuild", "package.json"), "utf8")).version;
  const scratch = mkdtempSync(join(tmpdir(), "st-esbuild-"));
  const pack = spawnSync("npm", ["pack", "-q", "--pack-destination", scratch, `@esbuild/linux-arm64@${version}`], {
    encoding: "utf8",
  });
  const tgz = readdirSync(scratch).find((name) => name.endsWith(".tgz"));
  if (pack.status !== 0 || !tgz) return `npm could not fetch @esbuild/linux-arm64@${version}: ${pack.stderr.trim()}`;
  mkdirSync(dir, { recursive: true });
  spawnSync("tar", ["xzf", join(scratch, tgz), "-C", dir, "--strip-components=1"]);
  rmSync(scratch, { recursive: true, force: true });
  return existsSync(join(dir, "bin", "esbuild")) ? undefined : "@esbuild/linux-arm64 did not unpack";
}

// Pack once (prepack builds every prebuild this machine can); the package test installs this tarball.
const packDir = mkdtempSync(join(tmpdir(), "st-matrix-"));
const pack = spawnSync("npm", ["pack", "--pack-destination", packDir], { cwd: root, encoding: "utf8" });
const tarball = readdirSync(packDir).find((name) => name.endsWith(".tgz"));
if (pack.status !== 0 || !tarball) {
  console.error(`${pack.stdout}${pack.stderr}`);
  log("FAILED: npm pack");
  process.exit(1);
}
log(`packed ${tarball}: ${pack.stdout.split("\n").find((l) => l.startsWith("prebuild:")) ?? ""}`);
for (const line of `${pack.stdout}${pack.stderr}`.split("\n").filter((l) => l.includes("SKIPPED"))) log(line);

// The checkout's tests load the addon from prebuilds/ first: the tarball's binaries are put there (build/Release
// holds this Node's ABI only), and removed again at the end.
const unpack = spawnSync("tar", [
  "xzf",
  join(packDir, tarball),
  "-C",
  root,
  "--strip-components=1",
  "package/prebuilds",
]);
if (unpack.status !== 0) {
  log(`FAILED: unpacking prebuilds/ from the tarball: ${unpack.stderr}`);
  process.exit(1);
}

const results = [];
const totals = { pass: 0, fail: 0, skipped: 0 };
for (const arch of arches) {
  for (const major of majors) {
    if (arch === process.arch && major === Number(process.versions.node.split(".")[0])) continue; // npm test ran it
    const label = `Node ${major} ${arch}`;
    const build = nodeBuild(major, arch, { install: false });
    if (build.missing) {
      log(`SKIPPED ${label}: ${build.missing} (node scripts/node-builds.mjs install ${arch} ${major})`);
      results.push({ label, status: "skipped" });
      continue;
    }
    const env = { ...process.env, SAFETENSORS_PACKED_TARBALL: join(packDir, tarball) };
    let files = CORE;
    if (arch === "arm64") {
      const why = arm64Runs(build.bin) ?? esbuildArm64();
      if (why) {
        log(`SKIPPED ${label}: ${why}`);
        results.push({ label, status: "skipped" });
        continue;
      }
      env.QEMU_LD_PREFIX = QEMU_PREFIX;
      env.SAFETENSORS_TSC_NODE = process.execPath;
      files = ARM64;
      if (doctorArm64.includes(major)) {
        const doctor = spawnSync(build.bin, [join(root, "bin", "safetensors.js"), "doctor"], {
          cwd: root,
          env,
          encoding: "utf8",
          timeout: 10 * 60_000,
        });
        const ok =
          /default backend \(auto\): mmap/.test(doctor.stdout) && /mapped views: not counted/.test(doctor.stdout);
        log(
          `${ok ? "" : "FAILED "}${label}: doctor ${ok ? "reports mmap and uncounted views" : `says:\n${doctor.stdout}${doctor.stderr}`}`,
        );
        totals[ok ? "pass" : "fail"] += 1;
        results.push({ label, status: ok ? "passed" : "failed" });
        continue;
      }
    }
    const started = Date.now();
    const r = spawnSync(build.bin, ["--import", "tsx", "--test", "--test-reporter=tap", ...files], {
      cwd: root,
      env,
      encoding: "utf8",
      maxBuffer: 256 * 1024 * 1024,
      timeout: 30 * 60_000,
    });
    const seconds = ((Date.now() - started) / 1000).toFixed(0);
    const tap = `${r.stdout ?? ""}`;
    const count = (name) => [...tap.matchAll(new RegExp(`^# ${name} (\\d+)$`, "gm"))].at(-1)?.[1];
    const summary = `${count("pass") ?? "?"} passed, ${count("fail") ?? "?"} failed, ${count("skipped") ?? "?"} skipped`;
    for (const name of ["pass", "fail", "skipped"]) totals[name] += Number(count(name) ?? 0);
    const skips = [...tap.matchAll(/^\s*ok \d+ - (.*) # SKIP (.*)$/gm)].map((m) => `${m[1]}: ${m[2].slice(0, 160)}`);
    if (r.status === 0) {
      log(`${label}: ${summary} (${files.length} files, ${seconds}s)`);
      for (const skip of skips) log(`  skipped on ${label}: ${skip}`);
      results.push({ label, status: "passed" });
    } else {
      const failures = tap.split("\n").filter((line) => /^\s*not ok /.test(line));
      log(`FAILED ${label}: ${summary} (exit ${r.status ?? r.signal}, ${seconds}s)`);
      for (const line of failures) log(`  ${line.trim()}`);
      console.error(tap.slice(-20_000), r.stderr?.slice(-5_000));
      results.push({ label, status: "failed" });
    }
  }
}
rmSync(packDir, { recursive: true, force: true });
spawnSync(process.execPath, [join(root, "scripts", "prebuild.mjs"), "--clean"], { cwd: root });
const failed = results.filter((r) => r.status === "failed").length;
const passed = results.filter((r) => r.status === "passed").length;
log(`Node builds: ${passed} passed, ${failed} failed, ${results.length - passed - failed} skipped`);
// The closing line, in the plain form CI reads: the tests of every build together.
log(`${totals.pass} passed, ${totals.fail} failed, ${totals.skipped} skipped`);
process.exitCode = failed > 0 ? 1 : 0;
