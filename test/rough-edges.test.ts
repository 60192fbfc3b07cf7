/**
 * Issue 20, the rough edges a new user hit: errors that name the broken shard, commands that agree on the same
 * wrong input, "did you mean" for tensor names, CLI warnings in its own words, one-line summaries on success.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, test } from "node:test";
import { closestNames, editDistance } from "../src/format/suggest.js";
import {
  journalPathFor,
  openFile,
  openForEdit,
  openSharded,
  SafetensorError,
  saveFile,
  saveSharded,
  Tensor,
} from "../src/node.js";
import { cliProcessSync } from "./helpers/cli.js";
import { corpusAvailable, corpusDir, corpusMissingReason } from "./helpers/corpus.js";
import { cli } from "./helpers/run-cli.js";

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-rough-edges-"));
process.on("exit", () => fs.rmSync(tmp, { recursive: true, force: true }));

/** A 4-shard checkpoint of small F32 tensors (a fresh copy per call). */
function checkpoint(name: string): { dir: string; shards: string[] } {
  const dir = path.join(tmp, name);
  const tensors = new Map<string, Tensor>();
  for (let k = 0; k < 8; k++) tensors.set(`layer.${k}.weight`, new Tensor("F32", [4, 8], new Uint8Array(128).fill(k)));
  saveSharded(dir, tensors, { maxShardSize: 300 });
  const shards = fs
    .readdirSync(dir)
    .filter((f) => f.endsWith(".safetensors"))
    .sort();
  assert.equal(shards.length, 4);
  return { dir, shards };
}

describe("a broken sharded checkpoint names the broken shard", () => {
  test("a truncated shard: validate --json, inspect, hash, merge and openSharded name it", async () => {
    const { dir, shards } = checkpoint("truncated");
    const broken = path.join(dir, shards[2]!);
    fs.truncateSync(broken, fs.statSync(broken).size - 50);

    const validate = await cli("validate", dir, "--json");
    assert.equal(validate.code, 1);
    const verdict = JSON.parse(validate.stdout);
    assert.equal(verdict.ok, false);
    assert.equal(verdict.error.code, "MetadataIncompleteBuffer");
    assert.equal(verdict.error.file, broken);
    assert.ok(verdict.error.message.startsWith(`${broken}: `), verdict.error.message);

    for (const argv of [
      ["inspect", dir],
      ["hash", dir],
      ["merge", dir, path.join(tmp, "merged.safetensors")],
    ]) {
      const run = await cli(...argv);
      assert.equal(run.code, 1, argv.join(" "));
      assert.match(run.stderr, /^error\[MetadataIncompleteBuffer\]: /, argv.join(" "));
      assert.ok(run.stderr.includes(broken), `${argv.join(" ")}: ${run.stderr}`);
      // The other shards are not blamed.
      for (const other of shards.filter((s) => s !== shards[2])) assert.ok(!run.stderr.includes(other), run.stderr);
    }

    assert.throws(
      () => openSharded(dir),
      (error: unknown) => {
        assert.ok(error instanceof SafetensorError);
        assert.equal(error.code, "MetadataIncompleteBuffer");
        assert.equal(error.file, broken);
        assert.ok(error.message.includes(shards[2]!), error.message);
        return true;
      },
    );
  });

  test("a missing shard: one clean IoError naming the file and the index that lists it", async () => {
    const { dir, shards } = checkpoint("missing");
    const gone = path.join(dir, shards[1]!);
    fs.rmSync(gone);
    for (const argv of [
      ["inspect", dir],
      ["validate", dir],
      ["merge", dir, path.join(tmp, "m2.safetensors")],
    ]) {
      const run = await cli(...argv);
      assert.equal(run.code, 1, argv.join(" "));
      assert.equal(
        run.stderr,
        `error[IoError]: cannot open ${gone}, a shard model.safetensors.index.json lists: no such file or directory (ENOENT)\n`,
      );
    }
    assert.throws(() => openSharded(dir), { code: "IoError", file: gone });
  });

  test("system errors are said once: no repeated errno, no raw syscall text", async () => {
    const missing = path.join(tmp, "nowhere.safetensors");
    for (const argv of [
      ["inspect", missing],
      ["get", missing, "x", "--out", "-"],
      ["validate", missing],
    ]) {
      const run = await cli(...argv);
      assert.equal(run.code, 1);
      assert.match(
        run.stderr,
        /^error\[IoError\]: cannot open .*nowhere\.safetensors: no such file or directory \(ENOENT\)\n$/,
      );
    }
  });
});

describe("commands agree on the same wrong input", () => {
  const folder = path.join(tmp, "conv");
  fs.mkdirSync(folder);
  for (const name of ["a.safetensors", "b.safetensors"]) {
    saveFile(path.join(folder, name), new Map([["x", new Tensor("F32", [2], new Uint8Array(8))]]));
  }
  const torchLike = path.join(tmp, "model.pt");
  // A zip whose first record is what torch.save writes first.
  const zip = new Uint8Array(30 + 16 + 64);
  zip.set([0x50, 0x4b, 0x03, 0x04]);
  zip[26] = 16;
  zip.set(new TextEncoder().encode("archive/data.pkl"), 30);
  fs.writeFileSync(torchLike, zip);
  const out = path.join(tmp, "out.safetensors");
  const commands = (input: string) => [
    ["inspect", input],
    ["get", input, "x", "--out", "-"],
    ["merge", input, out],
    ["shard", input, path.join(tmp, "outdir")],
    ["extract", input, out, "--tensor", "x"],
    ["drop", input, out, "--tensor", "x"],
    ["cast", input, out, "--to", "f16"],
    ["rename", input, out, "--map", "a=b"],
    ["set-metadata", input, out, "a=b"],
    ["diff", path.join(folder, "a.safetensors"), input],
  ];

  test("a folder that is not a checkpoint: every command gives inspect's message", async () => {
    const expected = (await cli("inspect", folder)).stderr;
    assert.match(expected, /^error\[NotSafetensors\]: .*conv is a directory.*give one of its 2 \.safetensors files/);
    for (const argv of commands(folder)) {
      const run = await cli(...argv);
      assert.notEqual(run.code, 0, argv.join(" "));
      assert.equal(run.stderr, expected, argv.join(" "));
    }
  });

  test("a PyTorch checkpoint: every command names it and the convert command", async () => {
    for (const argv of commands(torchLike)) {
      const run = await cli(...argv);
      assert.notEqual(run.code, 0, argv.join(" "));
      assert.match(run.stderr, /^error\[NotSafetensors\]: .*model\.pt is a PyTorch checkpoint/, argv.join(" "));
      assert.match(run.stderr, /safetensors convert /, argv.join(" "));
    }
  });

  test("a file where the command should be: suggests inspect", async () => {
    const file = path.join(folder, "a.safetensors");
    const run = await cli(file);
    assert.equal(run.code, 2);
    assert.match(
      run.stderr,
      new RegExp(
        `unknown command ".*a\\.safetensors": to look inside it, run 'safetensors inspect ${file.replace(/[.]/g, "\\.")}'`,
      ),
    );
    // A word that is no file still gets the command suggestions.
    assert.match((await cli("inspekt")).stderr, /did you mean "inspect"/);
  });
});

describe("did you mean, for tensor names", () => {
  const file = path.join(tmp, "gpt.safetensors");
  const names = [
    "transformer.wte.weight",
    "transformer.wpe.weight",
    "transformer.h.0.attn.c_attn.weight",
    "lm_head.weight",
  ];
  saveFile(file, new Map(names.map((name) => [name, new Tensor("F32", [2], new Uint8Array(8))])));

  test("closestNames: typos within a third of the length, prefixes added or left out, nothing far", () => {
    assert.deepEqual(closestNames("transformer.wte.weigth", names), ["transformer.wte.weight"]);
    assert.deepEqual(closestNames("TRANSFORMER.WTE.WEIGHT", names), ["transformer.wte.weight"]);
    assert.deepEqual(closestNames("wte.weight", names), ["transformer.wte.weight"]);
    assert.deepEqual(closestNames("model.lm_head.weight", names), ["lm_head.weight"]);
    assert.deepEqual(closestNames("transformer.wxe.weight", names), [
      "transformer.wpe.weight",
      "transformer.wte.weight",
    ]);
    assert.deepEqual(closestNames("bias", names), []);
    assert.deepEqual(closestNames("", names), []);
    // The bounded distance agrees with the full one wherever it is within the limit.
    for (const [a, b] of [
      ["kitten", "sitting"],
      ["abcdef", "badcfe"],
      ["", "abc"],
      ["flaw", "lawn"],
    ] as const) {
      const full = editDistance(a, b);
      for (const limit of [0, 1, 2, 3, 5])
        assert.equal(editDistance(a, b, limit), Math.min(full, limit + 1), `${a} ${b} ${limit}`);
    }
  });

  test("the library's TensorNotFound has the closest names in its message and as data", () => {
    using opened = openFile(file);
    assert.throws(
      () => opened.getTensor("transformer.wte.weigth"),
      (error: unknown) => {
        assert.ok(error instanceof SafetensorError);
        assert.equal(error.code, "TensorNotFound");
        assert.equal(error.tensor, "transformer.wte.weigth");
        assert.deepEqual(error.suggestions, ["transformer.wte.weight"]);
        assert.equal(
          error.message,
          'no tensor named "transformer.wte.weigth" (did you mean "transformer.wte.weight"?)',
        );
        return true;
      },
    );
    assert.throws(() => opened.getTensor("nothing.like.it"), { code: "TensorNotFound", suggestions: [] });
    const { dir } = checkpoint("suggest");
    using sharded = openSharded(dir);
    assert.throws(() => sharded.getTensor("layer.1.weihgt"), {
      code: "TensorNotFound",
      suggestions: ["layer.1.weight"],
    });
  });

  test("CLI get, extract and rename suggest too", async () => {
    const get = await cli("get", file, "transformer.wte.weigth", "--out", "-");
    assert.equal(get.code, 1);
    assert.equal(
      get.stderr,
      'error[TensorNotFound]: no tensor named "transformer.wte.weigth" (did you mean "transformer.wte.weight"?)\n',
    );
    const out = path.join(tmp, "x.safetensors");
    for (const argv of [
      ["extract", file, out, "--tensor", "lm_head.weigth"],
      ["rename", file, out, "--map", "lm_head.weigth=head"],
    ]) {
      const run = await cli(...argv);
      assert.equal(run.code, 1);
      assert.match(run.stderr, /^error\[TensorNotFound\]: .*\(did you mean "lm_head\.weight"\?\)\n$/);
    }
  });
});

describe("the byte-copy commands say what they wrote", () => {
  test("shard, merge, cast, extract, drop, rename, set-metadata: one line each", async () => {
    const { dir } = checkpoint("summaries");
    const out = (name: string) => path.join(tmp, name);
    const line = (what: string, tensors: string) =>
      new RegExp(`^wrote ${what.replace(/[.\\]/g, "\\$&")}: ${tensors}, [\\d.]+ (B|KiB) in [\\d.]+ s\\n$`);
    const cases: [string[], RegExp][] = [
      [["merge", dir, out("m.safetensors")], line(out("m.safetensors"), "8 tensors \\(from 4 shards\\)")],
      [
        ["shard", out("m.safetensors"), out("sharded"), "--max-shard-size", "600"],
        line(`2 shards and model.safetensors.index.json in ${out("sharded")}`, "8 tensors"),
      ],
      [
        ["cast", dir, out("half"), "--to", "f16"],
        line(`4 shards and model.safetensors.index.json in ${out("half")}`, "8 tensors \\(8 cast to F16\\)"),
      ],
      [
        ["extract", out("m.safetensors"), out("e.safetensors"), "--match", "^layer\\.[01]\\."],
        line(out("e.safetensors"), "2 tensors \\(of 8\\)"),
      ],
      [
        ["drop", out("m.safetensors"), out("d.safetensors"), "--tensor", "layer.0.weight"],
        line(out("d.safetensors"), "7 tensors \\(1 dropped\\)"),
      ],
      [
        ["rename", out("m.safetensors"), out("r.safetensors"), "--sub", "^layer=block"],
        line(out("r.safetensors"), "8 tensors \\(8 renamed\\)"),
      ],
      [
        ["set-metadata", out("m.safetensors"), out("s.safetensors"), "a=1", "b=2"],
        line(out("s.safetensors"), "8 tensors \\(metadata 2 set: 3 keys now\\)"),
      ],
    ];
    for (const [argv, expected] of cases) {
      const run = await cli(...argv);
      assert.equal(run.code, 0, `${argv.join(" ")}: ${run.stderr}`);
      assert.match(run.stdout, expected, `${argv.join(" ")}: ${run.stdout}`);
    }
    // --json stays the JSON summary alone.
    const json = await cli("merge", dir, out("m2.safetensors"), "--json");
    assert.deepEqual(Object.keys(JSON.parse(json.stdout)), ["files", "bytes", "tensors", "seconds"]);
  });
});

describe("warnings in the CLI's own words", () => {
  /** A file whose in-place edit was interrupted: its journal is still next to it. */
  function crashed(name: string): string {
    const file = path.join(tmp, `${name}-live.safetensors`);
    saveFile(file, new Map([["w", new Tensor("F32", [4], new Uint8Array(16))]]));
    const edit = openForEdit(file);
    edit.write("w", "::2", { fill: 1 });
    const copy = path.join(tmp, `${name}.safetensors`);
    fs.copyFileSync(file, copy);
    fs.copyFileSync(journalPathFor(file), journalPathFor(copy));
    edit.close();
    return copy;
  }

  test("an interrupted edit: 'warning: ...' with the command to run, not Node's format", async () => {
    const file = crashed("crash-a");
    const run = await cli("inspect", file);
    assert.equal(run.code, 0);
    assert.equal(
      run.stderr,
      `warning: ${file} has an undo journal (${journalPathFor(file)}): an in-place edit is in progress or was ` +
        `interrupted, so the file may hold part of it; run 'safetensors recover ${file}' to roll it back\n`,
    );
    // As a process: Node's own "(node:PID) [CODE] SafetensorsWarning: ..." line is not printed.
    const other = crashed("crash-b");
    const child = cliProcessSync(["inspect", other], { input: new Uint8Array(0) });
    assert.equal(child.status, 0);
    const stderr = String(child.stderr);
    assert.match(stderr, /^warning: .*crash-b\.safetensors has an undo journal .*run 'safetensors recover /);
    assert.doesNotMatch(stderr, /\(node:\d+\)|SafetensorsWarning|--trace-warnings/);
  });

  test("the library still emits a process warning, carrying the paths", async () => {
    const file = crashed("crash-c");
    const seen: (Error & { code?: string; file?: string; journal?: string })[] = [];
    const listener = (warning: Error) => seen.push(warning);
    process.on("warning", listener);
    openFile(file).close();
    await new Promise((resolve) => setImmediate(resolve));
    process.off("warning", listener);
    assert.equal(seen.length, 1);
    assert.equal(seen[0]!.name, "SafetensorsWarning");
    assert.equal(seen[0]!.code, "SAFETENSORS_INTERRUPTED_EDIT");
    assert.equal(seen[0]!.file, file);
    assert.equal(seen[0]!.journal, journalPathFor(file));
  });
});

describe("inspect fits a screen; --metadata and --tensors show the rest", () => {
  /** A kohya-style LoRA: 200 tensors, 30 metadata keys, JSON inside strings. */
  const lora = path.join(tmp, "lora.safetensors");
  const tags = { "10_falcon": { "smart falcon": 43, "hair bow": 40, smile: 36 } };
  const metadata: Record<string, string> = {
    ss_network_module: "networks.lora",
    ss_network_dim: "16",
    ss_network_alpha: "8.0",
    ss_tag_frequency: JSON.stringify(tags),
    ss_dataset_dirs: JSON.stringify({ "10_falcon": { n_repeats: 10, img_count: 43 } }),
    ss_training_comment: "trigger word is smart falcon",
  };
  for (let k = 0; k < 24; k++) metadata[`ss_setting_${k}`] = `value ${k}`;
  const tensors = new Map<string, Tensor>();
  for (let k = 0; k < 200; k++) {
    tensors.set(
      `lora_unet_block_${String(k).padStart(3, "0")}.lora_down.weight`,
      new Tensor("F16", [4, 8], new Uint8Array(64)),
    );
  }
  saveFile(lora, tensors, new Map(Object.entries(metadata)));

  test("the default: the facts, the key count, the first 20 tensors, the totals, and how to see more", async () => {
    const run = await cli("inspect", lora);
    assert.equal(run.code, 0);
    const lines = run.stdout.trimEnd().split("\n");
    assert.ok(lines.length <= 40, `${lines.length} lines`);
    assert.match(lines[0]!, /lora\.safetensors: [\d,]+ bytes .*, 200 tensors, 6,400 parameters$/);
    assert.match(run.stdout, /\n {2}Network module: +networks\.lora\n/);
    assert.match(run.stdout, /\n {2}Network dim \(rank\): 16\n/);
    assert.match(run.stdout, /\n {2}Top tags: +smart falcon \(43\), hair bow \(40\), smile \(36\)\n/);
    assert.ok(
      run.stdout.includes(`\nmetadata: 30 keys: 'safetensors inspect ${lora} --metadata' shows them in full\n`),
    );
    assert.match(run.stdout, /\nlora_unet_block_019\.lora_down\.weight +F16 +\[4, 8\] +64\n/);
    assert.doesNotMatch(run.stdout, /block_020/);
    assert.ok(
      run.stdout.includes(
        `\n... and 180 more tensors (200 in all): 'safetensors inspect ${lora} --tensors' lists them all\n`,
      ),
    );
    assert.match(run.stdout, /\ntotal +200 +6,400 +12,800\n$/);
  });

  test("--metadata: every value whole, JSON inside strings pretty-printed, no tensors", async () => {
    const run = await cli("inspect", lora, "--metadata");
    assert.equal(run.code, 0);
    assert.match(run.stdout, /\nmetadata \(30 keys\):\n/);
    assert.ok(
      run.stdout.includes(`  ss_tag_frequency: {"10_falcon": {"smart falcon": 43, "hair bow": 40, "smile": 36}}\n`),
    );
    assert.ok(run.stdout.includes("  ss_setting_23: value 23\n"));
    assert.doesNotMatch(run.stdout, /lora_unet|dtype/);
    // A long JSON value is spread over lines, two spaces an indent.
    const long = path.join(tmp, "long.safetensors");
    const buckets = Object.fromEntries(
      Array.from({ length: 6 }, (_, k) => [String(k), { resolution: [512, 512 + 64 * k], count: k }]),
    );
    saveFile(long, tensors, new Map([["ss_bucket_info", JSON.stringify({ buckets })]]));
    const spread = await cli("inspect", long, "--metadata");
    assert.ok(
      spread.stdout.includes(
        '  ss_bucket_info:\n    {\n      "buckets": {\n        "0": {"resolution": [512, 512], "count": 0},\n',
      ),
      spread.stdout,
    );
  });

  test("--tensors: every tensor and the totals, no metadata; --json with either is a usage error", async () => {
    const run = await cli("inspect", lora, "--tensors");
    assert.equal(run.code, 0);
    assert.match(run.stdout, /\nlora_unet_block_199\.lora_down\.weight +F16/);
    assert.doesNotMatch(run.stdout, /Network module|metadata|more tensors/);
    const both = await cli("inspect", lora, "--tensors", "--metadata");
    assert.match(both.stdout, /Network module/);
    assert.match(both.stdout, /block_199/);
    const json = await cli("inspect", lora, "--json", "--tensors");
    assert.equal(json.code, 2);
    assert.match(json.stderr, /--json prints everything/);
  });

  test("one key is '1 key'; a checkpoint's line has thousands separators", async () => {
    const one = path.join(tmp, "one.safetensors");
    saveFile(one, new Map([["x", new Tensor("F32", [2], new Uint8Array(8))]]), new Map([["format", "pt"]]));
    assert.match((await cli("inspect", one)).stdout, /\nmetadata \(1 key\):\n {2}format: "pt"\n/);
    const dir = path.join(tmp, "big-ckpt");
    const big = new Map<string, Tensor>();
    for (let k = 0; k < 4; k++) big.set(`w${k}`, new Tensor("F32", [40, 40], new Uint8Array(6400)));
    saveSharded(dir, big, { maxShardSize: 7000 });
    const run = await cli("inspect", dir);
    assert.equal(run.code, 0, run.stderr);
    assert.match(
      run.stdout,
      /^.*big-ckpt: 4 shards, 4 tensors, 6,400 parameters, 25,600 data bytes \(25\.0 KiB\), index model\.safetensors\.index\.json\n/,
    );
    assert.match(run.stdout, /\nshards:\n {2}model-00001-of-00004\.safetensors {2}1 tensor {2}6\.25 KiB\n/);
    assert.match(run.stdout, /\nevery shard's metadata \(1 key\):\n/);
    assert.match(run.stdout, /\ntotal +4 +6,400 +25,600\n$/);
  });

  test("the other summaries count the same way: '1 metadata key differs', '1 file', '3 shards', '5,272 bytes'", async () => {
    const a = path.join(tmp, "count-a.safetensors");
    const b = path.join(tmp, "count-b.safetensors");
    const x = new Tensor("F32", [2], new Uint8Array(8));
    saveFile(a, { x }, { format: "pt" });
    saveFile(b, { x }, { format: "np" });
    const diff = await cli("diff", a, b);
    assert.equal(diff.code, 1, diff.stderr);
    assert.match(diff.stdout, /\ndiffer: 1 same, 1 metadata key differs\n$/);
    const manifest = await cli("manifest", "create", a, "-o", path.join(tmp, "count.manifest.json"));
    assert.match(manifest.stdout, /^wrote .*count\.manifest\.json \(1 file, 1 tensor\)\n$/);
    const bins = path.join(import.meta.dirname, "fixtures", "pickle-dirs", "sharded");
    const convert = await cli("convert", bins, path.join(tmp, "count-converted"));
    assert.equal(convert.code, 0, convert.stderr);
    assert.match(convert.stdout, /: 3 shards, 20 tensors, 13,536 bytes, index model\.safetensors\.index\.json\n/);
    assert.match(
      convert.stdout,
      /\n {2}pytorch_model-00001-of-00003\.bin -> model-00001-of-00003\.safetensors: 6 tensors, 5,272 bytes\n/,
    );
    assert.doesNotMatch(`${diff.stdout}${manifest.stdout}${convert.stdout}`, /\(s\)|\b1 (files|tensors|keys)\b/);
  });
});

test("the kohya LoRA of the corpus: a screen by default, its tag counts readable with --metadata", {
  skip: !corpusAvailable && corpusMissingReason,
}, async () => {
  const kohya = path.join(corpusDir, "kohya-lycoris-lokr-smart-falcon.safetensors");
  const run = await cli("inspect", kohya);
  assert.equal(run.code, 0);
  assert.ok(run.stdout.split("\n").length <= 50, run.stdout);
  assert.match(run.stdout, /\n {2}Trigger words: +trigger word is smart falcon/);
  assert.match(run.stdout, /\n {2}Algorithm: +lokr\n/);
  const full = await cli("inspect", kohya, "--metadata");
  assert.match(
    full.stdout,
    /\n {2}ss_tag_frequency:\n {4}\{\n {6}"16_smf girl": \{\n {8}"smart falcon \\\\\(umamusume\\\\\)": 43,\n/,
  );
  assert.match(full.stdout, /\n {2}ss_network_args: \{"conv_rank": "4", "conv_alpha": "4", "algo": "lokr"\}\n/);
});

test("--help lists every command; help manifest says Sigstore bundles, Ed25519 and ECDSA", async () => {
  const { COMMANDS } = await import("../src/cli/commands.js");
  const help = await cli("--help");
  for (const { name } of COMMANDS) assert.match(help.stdout, new RegExp(`\\n {2}${name} +\\S`), name);
  for (const name of ["scan", "convert", "diff", "patch", "manifest"]) assert.ok(help.stdout.includes(`  ${name} `));
  assert.match(
    help.stdout,
    /\n {2}manifest +integrity manifests: create, sign \(a Sigstore bundle; Ed25519 or ECDSA key\)/,
  );
  const manifest = await cli("help", "manifest");
  assert.match(manifest.stdout, /Sigstore bundle/);
  assert.match(manifest.stdout, /Ed25519/);
  assert.match(manifest.stdout, /ECDSA P-256\/P-384\/P-521/);
});
