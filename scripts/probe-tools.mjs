// What the probes (probe-load.mjs, probe-import.mjs) share: options, failing loudly, the packed tarball installed
// with --ignore-scripts into a scratch project (as a user whose npm runs no install scripts gets it), medians, load.
import { spawnSync } from "node:child_process";
import { mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { root } from "./native-tools.mjs";

export function option(name, fallback) {
  const at = process.argv.indexOf(name);
  return at >= 0 && process.argv[at + 1] !== undefined ? process.argv[at + 1] : fallback;
}

/** `r`'s stdout, or its output printed and the process ended (status 1) when it failed. */
export function must(r, what, tool) {
  if (r.status !== 0) {
    console.error(`${r.stdout ?? ""}${r.stderr ?? ""}`);
    console.error(`${tool}: ${what} failed`);
    process.exit(1);
  }
  return r.stdout;
}

/**
 * `scratch`/app: a project with the package installed from `tarball` (packed from this checkout into `scratch` when
 * none is given), with --ignore-scripts. Returns the app's folder.
 */
export function installTarball(scratch, tarball, tool) {
  if (!tarball) {
    must(
      spawnSync("npm", ["pack", "-q", "--pack-destination", scratch], { cwd: root, encoding: "utf8" }),
      "npm pack",
      tool,
    );
    tarball = join(
      scratch,
      readdirSync(scratch).find((name) => name.endsWith(".tgz")),
    );
  }
  const app = join(scratch, "app");
  mkdirSync(app, { recursive: true });
  writeFileSync(join(app, "package.json"), '{"private":true,"type":"module"}\n');
  must(
    spawnSync("npm", ["install", "--ignore-scripts", "--no-audit", "--no-fund", tarball], {
      cwd: app,
      encoding: "utf8",
    }),
    "npm install --ignore-scripts of the tarball",
    tool,
  );
  return app;
}

export function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

/** The load averages, as uptime prints them. */
export function readLoad() {
  return spawnSync("uptime", { encoding: "utf8" })
    .stdout.trim()
    .replace(/^.*load average:\s*/, "");
}
