/** `npm run bench` options. */
import { spawnSync } from "node:child_process";
import * as path from "node:path";
import { parseArgs } from "node:util";
import { FIGURES } from "../figures/index.js";
import { BENCH_DIR, DEFAULT_OUT_DIR, REPO_DIR } from "../spec.js";

export interface Options {
  runs: number;
  json: string | null;
  /** Selected figure names, in registry order. */
  only: string[];
  /** Whether the whole registry is selected (only full runs rewrite RESULTS.md and the history by default). */
  full: boolean;
  hostile: boolean;
  reference: boolean;
  timeoutMs: number;
  /** Where the checkpoint and its .pt twin live (made there when missing). */
  outDir: string;
  /** The markdown report to write, or null. */
  results: string | null;
  /** The run history merged into the report (and appended to), or null. */
  history: string | null;
  /** Keep STRIPPED_ENV in the children's environment (measure the machine as it is set up). */
  keepEnv: boolean;
  /**
   * The Node binaries our side runs on, each measured in turn beside the reference (`--node`); the first is the one
   * the reports are made for. Default: this process's.
   */
  nodes: string[];
  argv: string[];
}

export const USAGE = `usage: npm run bench -- [--runs N] [--json PATH] [--only NAME[,NAME]] [--no-reference] [--timeout SECONDS]
                        [--out-dir DIR] [--results PATH] [--history PATH] [--keep-env] [--node PATH[,PATH]|all]

  --runs N         counted runs per side (default 5), after one uncounted warm-up each; sides are interleaved
  --json PATH      write every figure's figures as JSON
  --only LIST      figures to measure (default all): ${[...FIGURES.map((f) => f.name), "hostile"].join(", ")}
  --no-reference   skip the reference's side
  --timeout S      per-process timeout (default 600)
  --out-dir DIR    where the checkpoint files live or are made (default bench/out; env SAFETENSORS_BENCH_DIR)
  --results PATH   markdown report (default bench/RESULTS.md on full runs, none with --only)
  --history PATH   earlier runs' medians, merged into the report and appended to by this run
                   (default bench/history.json when the report is bench/RESULTS.md)
  --node LIST      our side on these Node binaries, each beside the reference, with a table per figure and Node
                   at the end; "all": this Node and every build scripts/node-builds.mjs installed (x64)
  --keep-env       run the children with NODE_EXTRA_CA_CERTS as set here (removed by default: Node parses that
                   certificate bundle at every start-up; the report shows the start-up cost both ways)`;

/** `--node`: paths, or "all" (this Node and each installed build of scripts/node-builds.mjs for this CPU). */
function nodesOf(value: string | undefined, resolve: (p: string) => string | null): string[] {
  if (value === undefined) return [process.execPath];
  if (value !== "all") return value.split(",").map((p) => resolve(p.trim())!);
  const list = spawnSync(process.execPath, [path.join(REPO_DIR, "scripts", "node-builds.mjs"), "list", process.arch], {
    encoding: "utf8",
  });
  const others = list.stdout
    .split("\n")
    .map((line) => line.split(" ")[2])
    .filter((bin): bin is string => Boolean(bin));
  return [process.execPath, ...others];
}

export function parseOptions(argv: string[]): Options | "help" {
  const { values } = parseArgs({
    args: argv,
    options: {
      runs: { type: "string" },
      json: { type: "string" },
      only: { type: "string" },
      "no-reference": { type: "boolean" },
      timeout: { type: "string" },
      "out-dir": { type: "string" },
      results: { type: "string" },
      history: { type: "string" },
      "keep-env": { type: "boolean" },
      node: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
    strict: true,
  });
  if (values.help) return "help";
  const runs = values.runs === undefined ? 5 : Number(values.runs);
  if (!Number.isInteger(runs) || runs < 1) throw new Error(`--runs must be a positive integer, got ${values.runs}`);
  const timeout = values.timeout === undefined ? 600 : Number(values.timeout);
  if (!(timeout > 0)) throw new Error(`--timeout must be a positive number of seconds, got ${values.timeout}`);
  const names = FIGURES.map((f) => f.name);
  let only = names;
  let hostile = true;
  if (values.only !== undefined) {
    const wanted = values.only
      .split(",")
      .map((s) => s.trim())
      .filter(Boolean);
    const unknown = wanted.filter((w) => w !== "hostile" && !names.includes(w));
    if (unknown.length > 0 || wanted.length === 0) {
      throw new Error(
        `--only: unknown figure(s) ${unknown.join(", ") || "(none given)"}; figures: ${names.join(", ")}, hostile`,
      );
    }
    only = names.filter((f) => wanted.includes(f));
    hostile = wanted.includes("hostile");
  }
  const full = values.only === undefined;
  // npm run changes the working directory to the package root; INIT_CWD is where the user typed the command.
  const base = process.env.INIT_CWD ?? process.cwd();
  const resolve = (p: string | undefined) => (p === undefined ? null : path.resolve(base, p));
  const defaultResults = path.join(BENCH_DIR, "RESULTS.md");
  const results = resolve(values.results) ?? (full ? defaultResults : null);
  const history = resolve(values.history) ?? (results === defaultResults ? path.join(BENCH_DIR, "history.json") : null);
  const outDir = resolve(values["out-dir"]) ?? path.resolve(process.env.SAFETENSORS_BENCH_DIR ?? DEFAULT_OUT_DIR);
  return {
    runs,
    json: resolve(values.json),
    only,
    full,
    hostile,
    reference: !values["no-reference"],
    timeoutMs: timeout * 1000,
    outDir,
    results,
    history,
    keepEnv: values["keep-env"] === true,
    nodes: nodesOf(values.node, resolve),
    argv,
  };
}
