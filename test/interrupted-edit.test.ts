/**
 * The interrupted-edit check every reader of a local file makes (openFile, loadFile; both backends; with and without
 * the addon): a file with an undo journal next to it warns once per file, throws `InterruptedEdit` or reads on, per
 * `interruptedEdit`. With the addon the journal's path is looked for in the native call that opens the file; the
 * paths it cannot decide as Node's path helpers do (a ".." after a name: the lexical and the kernel's lookups part
 * across a symbolic link) go to the JavaScript check. Both must find the journal where the editor writes it
 * (`journalPathFor`).
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, describe, test } from "node:test";
import { loadNative, type NativeAddon } from "../src/io/native.js";
import { isSafetensorError, journalPathFor, loadFile, openFile, saveFile, Tensor } from "../src/node.js";
import { moduleUrl } from "./helpers/compiled.js";
import { repoRoot } from "./helpers/corpus.js";
import { runWithoutAddon } from "./helpers/no-addon.js";

const backends = loadNative() ? (["pread", "mmap"] as const) : (["pread"] as const);
const tmp = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "st-journal-")));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

let counter = 0;
/** A fresh small file (a new name each time: warnings are once per file per process). */
function sample(dir = tmp, name = `f${counter++}.safetensors`): string {
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, name);
  saveFile(file, new Map([["t", Tensor.fromTypedArray("F32", [2], Float32Array.from([1, 2]))]]));
  return file;
}

function withJournal(file: string): string {
  fs.writeFileSync(journalPathFor(file), "");
  return file;
}

/** Warnings of the interrupted-edit kind emitted while `fn` runs (they are emitted on the next tick). */
async function warningsOf(fn: () => void): Promise<string[]> {
  const seen: string[] = [];
  const listener = (warning: Error & { code?: string }) => {
    if (warning.code === "SAFETENSORS_INTERRUPTED_EDIT") seen.push(warning.message);
  };
  process.on("warning", listener);
  try {
    fn();
    await new Promise((resolve) => setImmediate(resolve));
  } finally {
    process.off("warning", listener);
  }
  return seen;
}

const openFds = () => (process.platform === "linux" ? fs.readdirSync("/proc/self/fd").length : 0);

const readers = {
  openFile: (file: string, options: Parameters<typeof openFile>[1]) => openFile(file, options).close(),
  loadFile: (file: string, options: Parameters<typeof loadFile>[1]) => void loadFile(file, options),
};

for (const backend of backends) {
  for (const [reader, read] of Object.entries(readers)) {
    describe(`${reader}, ${backend}`, () => {
      test("a journal: warns once per file, error throws InterruptedEdit (no descriptor left open), ignore reads", async () => {
        const file = withJournal(sample());
        const fds = openFds();
        assert.throws(
          () => read(file, { backend, interruptedEdit: "error" }),
          (error: unknown) => isSafetensorError(error) && error.code === "InterruptedEdit",
        );
        assert.equal(openFds(), fds);
        assert.deepEqual(await warningsOf(() => read(file, { backend, interruptedEdit: "ignore" })), []);
        const warned = await warningsOf(() => {
          read(file, { backend });
          read(file, { backend, interruptedEdit: "warn" });
        });
        assert.equal(warned.length, 1);
        assert.match(warned[0]!, /has an undo journal .*recoverFile/);
      });

      test("no journal: no warning, no error", async () => {
        const file = sample();
        assert.deepEqual(await warningsOf(() => read(file, { backend, interruptedEdit: "error" })), []);
        assert.deepEqual(await warningsOf(() => read(file, { backend })), []);
      });

      test("relative paths and '.', '..' and '//' segments find the journal where journalPathFor puts it", async () => {
        const dir = path.join(tmp, `rel-${backend}-${reader}`);
        fs.mkdirSync(path.join(tmp, "rel-elsewhere"), { recursive: true });
        const spellings = (file: string) => {
          const rel = path.relative(tmp, file);
          const [sub, name] = rel.split("/") as [string, string];
          return [
            rel,
            `./${rel}`,
            `${sub}/./${name}`,
            `${tmp}//${sub}//${name}`,
            `${sub}/../${sub}/${name}`,
            `rel-elsewhere/../${rel}`,
            `../${path.basename(tmp)}/${rel}`,
          ];
        };
        const cwd = process.cwd();
        process.chdir(tmp);
        try {
          for (let i = 0; i < spellings(dir).length; i++) {
            const file = sample(dir);
            const spelled = spellings(file)[i]!;
            read(spelled, { backend, interruptedEdit: "error" });
            withJournal(spelled);
            assert.ok(fs.existsSync(journalPathFor(file)), spelled);
            assert.throws(
              () => read(spelled, { backend, interruptedEdit: "error" }),
              (error: unknown) => isSafetensorError(error) && error.code === "InterruptedEdit",
              spelled,
            );
          }
        } finally {
          process.chdir(cwd);
        }
      });
    });
  }
}

test("across a symbolic link, '..' is resolved as Node's path helpers do (where the editor writes the journal)", () => {
  const real = path.join(tmp, "link-real", "sub");
  fs.mkdirSync(real, { recursive: true });
  const link = path.join(tmp, "link");
  fs.symlinkSync(real, link);
  // The kernel opens link-real/x; path.join makes the journal's path tmp/.x-journal (".." taken lexically).
  const file = sample(path.join(tmp, "link-real"), "x.safetensors");
  const through = `${tmp}/link/../x.safetensors`; // spelled by hand: path.join would normalize it
  assert.equal(journalPathFor(through), path.join(tmp, ".x.safetensors-journal"));
  for (const backend of backends) {
    // A journal at the kernel's place only: not the editor's journal for this spelling.
    fs.writeFileSync(path.join(path.dirname(file), ".x.safetensors-journal"), "");
    openFile(through, { backend, interruptedEdit: "error" }).close();
    fs.rmSync(path.join(path.dirname(file), ".x.safetensors-journal"));
    withJournal(through);
    assert.throws(
      () => openFile(through, { backend, interruptedEdit: "error" }),
      (error: unknown) => isSafetensorError(error) && error.code === "InterruptedEdit",
    );
    fs.rmSync(journalPathFor(through));
  }
});

test("a file whose name is too long to take the journal's affixes opens (it can have no journal)", () => {
  const file = sample(tmp, `${"n".repeat(240)}.safetensors`); // 252 bytes: the journal's name would be 261
  for (const backend of backends) {
    openFile(file, { backend, interruptedEdit: "error" }).close();
    assert.equal(loadFile(file, { backend }).size, 1);
  }
});

describe("the addon's openHead", { skip: loadNative() ? false : "native addon not built" }, () => {
  const addon = () => loadNative() as NativeAddon;
  const call = (file: string, journal: boolean) => {
    const info = new Float64Array(5);
    addon().openHead(file, new Uint8Array(16), info, journal);
    fs.closeSync(info[0]!);
    return info;
  };

  test("reports size, dev and ino as fs.statSync does, and the journal's state", () => {
    const file = sample();
    const stat = fs.statSync(file);
    const info = call(file, true);
    assert.deepEqual([...info.subarray(1, 5)], [stat.size, stat.dev, stat.ino, 0]);
    withJournal(file);
    assert.equal(call(file, true)[4], 1);
    assert.equal(call(file, false)[4], -1); // not asked
    // Undecided (a ".." after a name): left to the JavaScript check.
    const dir = path.basename(path.dirname(file));
    assert.equal(call(`${path.dirname(file)}/../${dir}/${path.basename(file)}`, true)[4], -1);
    // A leading ".." is kept by Node's normalization too: decided natively.
    const cwd = process.cwd();
    const below = path.join(tmp, "below");
    fs.mkdirSync(below, { recursive: true });
    process.chdir(below);
    try {
      assert.equal(call(`../${path.basename(file)}`, true)[4], 1);
    } finally {
      process.chdir(cwd);
    }
  });

  test("refuses an info array shorter than 5 and a missing journal flag", () => {
    const file = sample();
    const open = addon().openHead as (...args: unknown[]) => number;
    assert.throws(() => open(file, new Uint8Array(16), new Float64Array(2), true), /Float64Array of 5/);
    assert.throws(() => open(file, new Uint8Array(16), new Float64Array(5)), /needs 4 arguments/);
  });
});

test("without the addon the JavaScript check applies every policy", () => {
  const file = withJournal(sample());
  const script = `
    import { openFile, loadFile } from ${JSON.stringify(moduleUrl(path.join(repoRoot, "src/node.ts")))};
    const codes = [];
    for (const read of [(o) => openFile(${JSON.stringify(file)}, o).close(), (o) => loadFile(${JSON.stringify(file)}, o)]) {
      try { read({ interruptedEdit: "error" }); codes.push("read"); } catch (error) { codes.push(error.code); }
      read({ interruptedEdit: "ignore" });
    }
    let warnings = 0;
    process.on("warning", (w) => { if (w.code === "SAFETENSORS_INTERRUPTED_EDIT") warnings++; });
    openFile(${JSON.stringify(file)}).close();
    loadFile(${JSON.stringify(file)});
    setImmediate(() => console.log(JSON.stringify({ codes, warnings, backend: openFile(${JSON.stringify(file)}, { interruptedEdit: "ignore" }).backend })));`;
  assert.deepEqual(runWithoutAddon(script), {
    codes: ["InterruptedEdit", "InterruptedEdit"],
    warnings: 1,
    backend: "pread",
  });
});
