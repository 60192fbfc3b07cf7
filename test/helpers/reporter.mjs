/**
 * The `npm test` reporter: one line per test file while the run goes, then what needs reading, at the end: every
 * failure with its error and the standard error of its file, every skip grouped by its reason (the corpus, the
 * reference, Chromium... missing), and the totals. Node's TAP output printed ~6,600 lines where a failure or a skip
 * was hard to find. The full output of a file: `node --import tsx --test --test-reporter=spec test/NAME.test.ts`.
 *
 * Plain JavaScript: node loads reporters before `--import tsx` takes effect (a file run by hand; `npm test` runs
 * compiled tests, scripts/compile-tests.mjs). Events as node:test emits them (Node 20 to 26): `test:pass` /
 * `test:fail` in declaration order, `file` on each; a test file that fails outside its tests (a crash at load) is one
 * failure named by its path.
 */
import * as path from "node:path";
import { sourceOf } from "../../scripts/compile-tests.mjs";

/** Lines of a file's standard error shown with its failures (the end of it, where a crash says why). */
const STDERR_LINES = 40;
/** Lines of an error's stack shown (frames in node's internals and node_modules are left out first). */
const STACK_LINES = 12;

const color = process.stdout.isTTY === true && !process.env.NO_COLOR;
const paint = (code, text) => (color ? `\x1b[${code}m${text}\x1b[0m` : text);
const red = (text) => paint(31, text);
const yellow = (text) => paint(33, text);
const green = (text) => paint(32, text);

const relative = (file) => (file === undefined ? "(no file)" : path.relative(process.cwd(), file));
/**
 * The file an event names, absolute: a compiled test (scripts/compile-tests.mjs, into the folder SAFETENSORS_TEST_JS
 * names), or the link to it that scripts/run-tests.mjs runs, by its source, as node names it in the events of its
 * tests (source maps) but not in those of the file itself or its standard error.
 */
const fileNames = new Map();
const fileOf = (name) => {
  let file = fileNames.get(name);
  if (file === undefined) {
    const compiled = process.env.SAFETENSORS_TEST_JS;
    file = (compiled && sourceOf(compiled, path.resolve(name))) || path.resolve(name);
    fileNames.set(name, file);
  }
  return file;
};
const seconds = (ms) => `${(ms / 1000).toFixed(1)} s`;
const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

/** The error a test threw (node:test wraps it as the `cause` of its own ERR_TEST_FAILURE), as readable lines. */
function errorLines(error) {
  const wrapped = error;
  const inner = wrapped?.code === "ERR_TEST_FAILURE" && wrapped.cause !== undefined ? wrapped.cause : error;
  const text = inner instanceof Error ? (inner.stack ?? `${inner.name}: ${inner.message}`) : String(inner ?? "failed");
  const lines = text.split("\n");
  const frames = lines.filter((line) => /^\s+at /.test(line));
  const kept = frames.filter((line) => !/[( ]node:|node_modules/.test(line)).slice(0, STACK_LINES);
  return [...lines.filter((line) => !/^\s+at /.test(line)), ...kept.map((line) => line.trim())];
}

export default async function* reporter(source) {
  const started = performance.now();
  const files = new Map();
  const failures = [];
  const skips = new Map();
  const todos = [];
  /** Names of the suites enclosing the current event, by nesting level. */
  const suites = [];
  let current;

  const tally = (file) => {
    let entry = files.get(file);
    if (entry === undefined) {
      entry = { file, passed: 0, failed: 0, skipped: 0, todo: 0, ms: 0, stderr: [] };
      files.set(file, entry);
    }
    return entry;
  };
  const fileLine = (t) => {
    const parts = [`${t.passed} passed`];
    if (t.failed > 0) parts.push(red(`${t.failed} failed`));
    if (t.skipped > 0) parts.push(yellow(`${t.skipped} skipped`));
    if (t.todo > 0) parts.push(`${t.todo} todo`);
    const mark = t.failed > 0 ? red("FAIL") : green("ok  ");
    return `${mark} ${relative(t.file).padEnd(36)} ${parts.join(", ")} (${seconds(t.ms)})\n`;
  };

  for await (const event of source) {
    const { data } = event;
    if (event.type === "test:stderr" || event.type === "test:stdout") {
      if (data.file !== undefined && data.message !== undefined) tally(fileOf(data.file)).stderr.push(data.message);
      continue;
    }
    // test:start comes in declaration order, a suite's before its tests' (its test:pass comes after them).
    if (event.type === "test:start") {
      suites.length = data.nesting ?? 0;
      suites.push(data.name ?? "?");
      continue;
    }
    if (event.type !== "test:pass" && event.type !== "test:fail") continue;
    // Absolute in some events, relative to the cwd in others (Node 22+ for standard error).
    const file = data.file === undefined ? "(no file)" : fileOf(data.file);
    if (current !== undefined && current.file !== file) yield fileLine(current);
    current = tally(file);
    const nesting = data.nesting ?? 0;
    const isSuite = data.details?.type === "suite";
    // The file as a test of its own (Node 20 names it by its absolute path, later versions relative to the cwd).
    const isFileItself = nesting === 0 && data.name !== undefined && fileOf(data.name) === file;
    if (nesting === 0 && !isFileItself) current.ms += data.details?.duration_ms ?? 0;
    const title = isFileItself ? relative(file) : [...suites.slice(0, nesting), data.name ?? "?"].join(" › ");
    if (event.type === "test:fail") {
      const failureType = data.details?.error?.failureType;
      // A suite (or a file) whose tests failed is not a failure of its own.
      if (failureType === "subtestsFailed" && (isSuite || isFileItself)) continue;
      current.failed++;
      const error = isFileItself
        ? "the file failed outside its tests: see its standard error below"
        : data.details?.error;
      failures.push({ file, title, error });
    } else if (data.skip !== undefined && data.skip !== false) {
      const reason = typeof data.skip === "string" && data.skip !== "" ? data.skip : "(no reason given)";
      current.skipped++;
      const byFile = skips.get(reason) ?? new Map();
      byFile.set(file, [...(byFile.get(file) ?? []), `${title}${isSuite ? " (the whole suite)" : ""}`]);
      skips.set(reason, byFile);
    } else if (data.todo !== undefined && data.todo !== false) {
      current.todo++;
      todos.push(`${relative(file)}: ${title}${typeof data.todo === "string" ? ` (${data.todo})` : ""}`);
    } else if (!isSuite && !isFileItself) {
      current.passed++;
    }
  }
  if (current !== undefined) yield fileLine(current);

  const all = [...files.values()];
  const count = (key) => all.reduce((sum, t) => sum + t[key], 0);
  const out = [""];
  if (failures.length > 0) {
    out.push(red(`failures (${failures.length}):`));
    for (const failure of failures) {
      out.push(`${red("✖")} ${failure.title}  [${relative(failure.file)}]`);
      for (const line of errorLines(failure.error)) out.push(`    ${line}`);
    }
    for (const t of all) {
      if (t.failed === 0 || t.stderr.length === 0) continue;
      const lines = t.stderr.join("").trimEnd().split("\n");
      const cut = lines.length > STDERR_LINES ? lines.length - STDERR_LINES : 0;
      out.push(`standard error of ${relative(t.file)}${cut > 0 ? ` (its last ${STDERR_LINES} lines)` : ""}:`);
      for (const line of lines.slice(cut)) out.push(`  | ${line}`);
    }
    out.push("");
  }
  if (skips.size > 0) {
    out.push(yellow(`skipped (${count("skipped")}), by reason:`));
    for (const [reason, byFile] of skips) {
      out.push(`- ${reason}`);
      for (const [file, titles] of byFile) {
        const shown =
          titles.length <= 3 ? titles.join("; ") : `${titles.slice(0, 2).join("; ")} and ${titles.length - 2} more`;
        out.push(`    ${relative(file)}: ${shown}`);
      }
    }
    out.push("");
  }
  if (todos.length > 0) out.push(`todo (${todos.length}):`, ...todos.map((line) => `    ${line}`), "");
  const totals = [`${count("passed")} passed`];
  totals.push(count("failed") > 0 ? red(`${count("failed")} failed`) : "0 failed");
  totals.push(count("skipped") > 0 ? yellow(`${count("skipped")} skipped`) : "0 skipped");
  if (count("todo") > 0) totals.push(`${count("todo")} todo`);
  out.push(`${totals.join(", ")}; ${plural(all.length, "file")} in ${seconds(performance.now() - started)}`);
  if (failures.length > 0) {
    out.push("the full output of one file: node --import tsx --test --test-reporter=spec test/NAME.test.ts");
  }
  yield `${out.join("\n")}\n`;
}
