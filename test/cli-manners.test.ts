/**
 * The CLI as a new user meets it: --version, --help per command, short usage errors with a did-you-mean, global
 * options anywhere, other formats named for what they are, "-" for standard input, hash in sha256sum's format,
 * validate --json.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, test } from "node:test";
import { COMMANDS } from "../src/cli/commands.js";
import { openFile, saveFile, Tensor } from "../src/node.js";
import { cliProcessSync } from "./helpers/cli.js";
import { repoRoot } from "./helpers/corpus.js";
import { cli } from "./helpers/run-cli.js";

const example = path.join(repoRoot, "examples", "tiny-llama.safetensors");
const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-cli-manners-"));
process.on("exit", () => fs.rmSync(tmp, { recursive: true, force: true }));
const write = (name: string, bytes: Uint8Array | string) => {
  const file = path.join(tmp, name);
  fs.writeFileSync(file, bytes);
  return file;
};

/** A zip whose first record is what torch.save writes first. */
function torchZip(): Uint8Array {
  const name = "archive/data.pkl";
  const head = new Uint8Array(30 + name.length + 64);
  head.set([0x50, 0x4b, 0x03, 0x04]);
  head[26] = name.length;
  head.set(new TextEncoder().encode(name), 30);
  return head;
}

describe("help and usage", () => {
  test("--version and -V print package.json's version", async () => {
    const { version } = JSON.parse(fs.readFileSync(path.join(repoRoot, "package.json"), "utf8"));
    for (const argv of [["--version"], ["-V"], ["inspect", "--version"]]) {
      assert.deepEqual(await cli(...argv), { code: 0, stdout: `safetensors-ts ${version}\n`, stderr: "" });
    }
  });

  test("COMMAND --help and help COMMAND, for every command", async () => {
    for (const { name } of COMMANDS) {
      const viaFlag = await cli(name, "--help");
      assert.equal(viaFlag.code, 0, name);
      assert.match(viaFlag.stdout, new RegExp(`^usage: safetensors ${name}\\b`), name);
      assert.match(viaFlag.stdout, /global options:\n {2}--backend/, name);
      assert.match(viaFlag.stdout, /exit status: 0 ok, 1 invalid input.*, 2 usage error/, name);
      assert.deepEqual(await cli("help", name), viaFlag, name);
      assert.deepEqual(await cli("-h", name), viaFlag, name);
    }
    const get = (await cli("get", "-h")).stdout;
    assert.match(get, /-o, --out PATH/);
    assert.match(get, /SPEC is numpy basic indexing/);
    assert.match(get, /-1 is the last/);
    const top = await cli("--help");
    for (const { name, summary } of COMMANDS)
      assert.ok(top.stdout.includes(`${name}  `) && top.stdout.includes(summary));
  });

  test("unknown commands and options: one short error with a suggestion, exit 2", async () => {
    const cases: [string[], RegExp][] = [
      [["inspcet", example], /^safetensors: unknown command "inspcet" \(did you mean "inspect"\?\)\n/],
      [["frobnicate"], /^safetensors: unknown command "frobnicate"\n/],
      [["inspect", example, "--jsno"], /^safetensors: unknown option --jsno \(did you mean "--json"\?\)\n/],
      [
        ["--bakend", "pread", "inspect", example],
        /^safetensors: unknown option --bakend \(did you mean "--backend"\?\)\n/,
      ],
      [["hash", example, "-x"], /^safetensors: unknown option -x\n/],
      [
        ["inspect", example, "--backend", "fast"],
        /^safetensors: --backend must be auto, mmap or pread \(got "fast"\)\n/,
      ],
      [["get", example, "w", "--out"], /^safetensors: --out needs a value \(PATH\)\n/],
    ];
    for (const [argv, message] of cases) {
      const run = await cli(...argv);
      assert.equal(run.code, 2, argv.join(" "));
      assert.equal(run.stdout, "");
      assert.match(run.stderr, message, argv.join(" "));
      assert.ok(run.stderr.split("\n").length <= 4, `short: ${run.stderr}`);
      assert.doesNotMatch(run.stderr, /commands:/);
    }
    // No command at all: the overview, on stderr, exit 2.
    const bare = await cli();
    assert.equal(bare.code, 2);
    assert.match(bare.stderr, /^usage: safetensors COMMAND/);
  });

  test("global options before or after the command", async () => {
    for (const argv of [
      ["--backend", "pread", "inspect", example, "--verbose"],
      ["inspect", "--backend=pread", example, "--verbose"],
      ["inspect", example, "--verbose", "--backend", "pread"],
      ["--verbose", "--backend", "pread", "inspect", example],
    ]) {
      const run = await cli(...argv);
      assert.equal(run.code, 0, argv.join(" "));
      assert.match(run.stdout.split("\n")[0]!, /, backend pread$/, argv.join(" "));
    }
  });
});

describe("inputs that are not safetensors", () => {
  const dir = path.join(tmp, "checkpoint");
  fs.mkdirSync(dir);
  fs.copyFileSync(example, path.join(dir, "model-00001-of-00002.safetensors"));
  const cases: [string, string, RegExp][] = [
    [
      write("model.bin", torchZip()),
      "a PyTorch checkpoint \\(torch\\.save zip archive\\)",
      /(safetensors convert|save_file)/,
    ],
    [
      write(
        "old.pt",
        Uint8Array.from([0x80, 2, 0x8a, 10, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, 0x2e]),
      ),
      "a legacy PyTorch checkpoint",
      /convert/,
    ],
    [dir, "a directory", /give one of its 1 \.safetensors files \(model-00001-of-00002\.safetensors\)/],
    [
      write("lfs.safetensors", "version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 123456\n"),
      "a Git LFS pointer file \\(the real file, 123456 bytes, was not downloaded\\)",
      /git lfs pull/,
    ],
    [write("hub.safetensors", "<!DOCTYPE html>\n<html><head><title>Hub</title>"), "an HTML page", /resolve\/main/],
    [write("empty.safetensors", ""), "an empty file", /interrupted/],
    [
      write("notes.safetensors", "# my model\nweights: see the link\n"),
      "a text file",
      /weights are in \.safetensors files/,
    ],
  ];
  for (const [file, what, advice] of cases) {
    test(`${path.basename(file)}: ${what.replace(/\\/g, "")}`, async () => {
      for (const command of ["inspect", "validate", "hash"]) {
        const run = await cli(command, file);
        assert.equal(run.code, 1, command);
        assert.match(
          run.stderr,
          new RegExp(
            `^error\\[NotSafetensors\\]: ${file.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} is ${what}.*, not a safetensors file; `,
          ),
        );
        assert.match(run.stderr, advice);
        assert.doesNotMatch(run.stderr, /HeaderTooLarge|InvalidHeader/);
      }
    });
  }

  test("a GGUF file is read as GGUF (here a truncated one: error[InvalidGguf])", async () => {
    const file = write("gguf.safetensors", "GGUF\u0003\u0000\u0000\u0000\u0000\u0000\u0000\u0000");
    for (const command of ["inspect", "validate", "hash"]) {
      const run = await cli(command, file);
      assert.equal(run.code, 1, command);
      assert.match(run.stderr, /^error\[InvalidGguf\]: truncated/, command);
    }
  });

  test("the library keeps the reference's code and names the format in the message", () => {
    assert.throws(
      () => openFile(cases[0]![0]),
      (error: Error & { code?: string }) =>
        error.code === "InvalidHeaderLength" &&
        /the file is a PyTorch checkpoint \(torch\.save zip archive\)/.test(error.message),
    );
  });

  test("unrecognised bytes that cannot be safetensors: NotSafetensors too, not HeaderTooLarge", async () => {
    const run = await cli(
      "inspect",
      write(
        "noise.bin",
        Uint8Array.from({ length: 64 }, (_, i) => (i * 151 + 7) % 256),
      ),
    );
    assert.equal(run.code, 1);
    assert.match(
      run.stderr,
      /^error\[NotSafetensors\]: .*noise\.bin is not a safetensors file: no JSON header after the 8-byte size\n$/,
    );
    // The header check those bytes fail is named in --json only (the text names what the file is, never a
    // header-length error).
    const json = await cli(
      "validate",
      "--json",
      write(
        "noise2.bin",
        Uint8Array.from({ length: 64 }, (_, i) => (i * 151 + 7) % 256),
      ),
    );
    assert.equal(json.code, 1);
    const verdict = JSON.parse(json.stdout) as { ok: boolean; error: { code: string; headerCheck?: string } };
    assert.deepEqual(
      [verdict.ok, verdict.error.code, verdict.error.headerCheck],
      [false, "NotSafetensors", "HeaderTooLarge"],
    );
  });

  test("a damaged safetensors file keeps its own error", async () => {
    const run = await cli("validate", write("short.safetensors", new Uint8Array([0x10, 0, 0, 0, 0, 0, 0, 0, 0x7b])));
    assert.match(run.stderr, /^error\[InvalidHeaderLength\]/);
  });
});

describe("standard input", () => {
  const bytes = new Uint8Array(fs.readFileSync(example));
  test("inspect -, validate -, hash - from a pipe and from a redirected file", () => {
    const fd = fs.openSync(example, "r");
    try {
      for (const stdin of [{ input: bytes }, { fd }]) {
        const inspect = cliProcessSync(["inspect", "--json", "-"], stdin);
        assert.equal(inspect.status, 0, String(inspect.stderr));
        assert.equal(JSON.parse(String(inspect.stdout)).tensors.length, 22);
        const validate = cliProcessSync(["validate", "-"], stdin);
        assert.deepEqual([validate.status, String(validate.stdout)], [0, "ok\n"]);
        const hash = cliProcessSync(["hash", "-"], stdin);
        assert.equal(String(hash.stdout), `${sha256(bytes)}  -\n`);
      }
    } finally {
      fs.closeSync(fd);
    }
    const pickle = cliProcessSync(["validate", "-"], { input: torchZip() });
    assert.equal(pickle.status, 1);
    assert.match(String(pickle.stderr), /^error\[NotSafetensors\]: standard input is a PyTorch checkpoint/);
  });

  test("a pipe is streamed: the same verdicts as the file's, at every length", () => {
    // A 3 MiB data region: more than one read from the pipe, tensors spanning reads, an empty tensor at the end.
    const file = write("stream.safetensors", "");
    saveFile(file, {
      big: Tensor.fromTypedArray(
        "F32",
        [768, 1024],
        Float32Array.from({ length: 768 * 1024 }, (_, i) => i % 977),
      ),
      small: Tensor.fromFloat32("BF16", [3], [1, 2, 3]),
      empty: new Tensor("F16", [0], new Uint8Array(0)),
    });
    const whole = new Uint8Array(fs.readFileSync(file));
    const hash = cliProcessSync(["hash", "--json", "-"], { input: whole });
    assert.equal(hash.status, 0, String(hash.stderr));
    const fromFile = JSON.parse(String(cliProcessSync(["hash", "--json", file], { input: new Uint8Array(0) }).stdout));
    assert.deepEqual(JSON.parse(String(hash.stdout)), fromFile);
    assert.equal(fromFile.file_sha256, sha256(whole));
    const headerEnd = 8 + Number(Buffer.from(whole).readBigUInt64LE(0));
    for (const [label, bytes] of [
      ["truncated in the data", whole.subarray(0, whole.length - 5)],
      ["one trailing byte", Buffer.concat([whole, Buffer.from([0])])],
      ["truncated in the header", whole.subarray(0, headerEnd - 3)],
      ["only the prefix", whole.subarray(0, 8)],
    ] as const) {
      const expected = cliProcessSync(["validate", write("cut.safetensors", bytes)], { input: new Uint8Array(0) });
      for (const command of ["validate", "inspect", "hash"]) {
        const run = cliProcessSync([command, "-"], { input: bytes });
        assert.equal(run.status, 1, `${label}: ${command}`);
        const code = (text: string) => /^error\[(\w+)\]/.exec(text)?.[1];
        assert.equal(code(String(run.stderr)), code(String(expected.stderr)), `${label}: ${command}: ${run.stderr}`);
        assert.match(String(run.stderr), /^error\[(MetadataIncompleteBuffer|InvalidHeaderLength)\]/, label);
      }
    }
  });

  test('"-" twice is a usage error', async () => {
    assert.equal((await cli("hash", "-", "-")).code, 2);
    assert.equal((await cli("validate", "-", "-")).code, 2);
  });
});

describe("hash", () => {
  const names = ["plain.safetensors", "with space.safetensors", "back\\slash.safetensors", "new\nline.safetensors"];
  const files = names.map((name) => {
    const file = path.join(tmp, name);
    saveFile(file, {
      [`t:${name}`]: Tensor.fromFloat32("F32", [2], [names.indexOf(name), 1]),
      "odd\nname": Tensor.fromFloat32("F16", [1], [2]),
    });
    return file;
  });

  test("several files, in sha256sum's format, names escaped as sha256sum does", async () => {
    const run = await cli("hash", ...files);
    assert.equal(run.code, 0);
    const digest = (i: number) => sha256(fs.readFileSync(files[i]!));
    assert.equal(
      run.stdout,
      [
        `${digest(0)}  ${files[0]}`,
        `${digest(1)}  ${files[1]}`,
        `\\${digest(2)}  ${files[2]!.replace("\\", "\\\\")}`,
        `\\${digest(3)}  ${files[3]!.replace("\n", "\\n")}`,
        "",
      ].join("\n"),
    );
  });

  test("sha256sum -c accepts the output, with or without --tensors", {
    skip: spawnSync("sha256sum", ["--version"]).status === 0 ? false : "sha256sum is not installed",
  }, async () => {
    for (const extra of [[], ["--tensors"], ["--tensors", "--ecosystem"]]) {
      const run = await cli("hash", ...extra, ...files);
      // By default the output is exactly sha256sum's: one line per file, nothing else.
      if (extra.length === 0) assert.equal(run.stdout.split("\n").filter(Boolean).length, files.length);
      const sums = write("SUMS", run.stdout);
      if (extra.length) assert.match(run.stdout, /^# tensor [0-9a-f]{64} {2}t:plain\.safetensors$/m);
      if (extra.length) assert.match(run.stdout, /^# tensor \\[0-9a-f]{64} {2}odd\\nname$/m);
      const check = spawnSync("sha256sum", ["-c", "--strict", sums], { encoding: "utf8" });
      assert.equal(check.status, 0, `${check.stdout}${check.stderr}`);
      assert.equal(check.stdout.match(/: OK$/gm)?.length, files.length);
      fs.appendFileSync(files[1]!, "x");
      const changed = spawnSync("sha256sum", ["-c", sums], { encoding: "utf8" });
      assert.equal(changed.status, 1);
      fs.truncateSync(files[1]!, fs.statSync(files[1]!).size - 1);
    }
  });

  test("--json: one object for one file, an array for several; failures listed and exit 1", async () => {
    // The ecosystem's digests are in the JSON by default; --ecosystem changes nothing there.
    const one = await cli("hash", "--json", files[0]!);
    const ecosystem = await cli("hash", "--json", "--ecosystem", files[0]!);
    assert.equal(one.stdout, ecosystem.stdout);
    assert.deepEqual(Object.keys(JSON.parse(one.stdout)), [
      "file_sha256",
      "data_sha256",
      "autov1",
      "autov2",
      "sshs_model_hash",
      "sshs_legacy_hash",
      "modelspec_hash_sha256",
      "tensors",
    ]);
    const bad = write("bad.safetensors", "<html>");
    const several = await cli("hash", "--json", files[0]!, bad, files[3]!);
    assert.equal(several.code, 1);
    const parsed = JSON.parse(several.stdout);
    assert.deepEqual(
      parsed.map((entry: { file: string }) => entry.file),
      [files[0], bad, files[3]],
    );
    assert.equal(parsed[2].file_sha256, sha256(fs.readFileSync(files[3]!)));
    assert.equal(parsed[2].tensors["odd\nname"].length, 64);
    assert.equal(parsed[1].error.code, "NotSafetensors");
    assert.match(several.stderr, /bad\.safetensors: error\[NotSafetensors\]/);
  });
});

test("validate --json", async () => {
  const bad = write("bad2.safetensors", new Uint8Array([1, 2, 3]));
  const one = await cli("validate", "--json", example);
  assert.deepEqual([one.code, JSON.parse(one.stdout)], [0, { file: example, ok: true }]);
  const several = await cli("validate", example, bad, "--json");
  assert.equal(several.code, 1);
  assert.equal(several.stderr, "");
  assert.deepEqual(JSON.parse(several.stdout), [
    { file: example, ok: true },
    { file: bad, ok: false, error: { code: "HeaderTooSmall", message: JSON.parse(several.stdout)[1].error.message } },
  ]);
});
