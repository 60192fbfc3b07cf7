/**
 * A set of malformed GGUF files, each made from a real one (to-gguf of a fixture) by damaging one thing, through the
 * commands users run: validate --json, inspect, hash and from-gguf refuse each with its stable code (exit 1), and
 * from-gguf writes nothing. The reader's own tests (gguf-reader.test.ts) cover each check on hand-made headers; this
 * is the user's side, on whole files.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, test } from "node:test";
import { main } from "../src/cli/main.js";
import { toGguf } from "../src/gguf/node-convert.js";
import { openGgufSync } from "../src/gguf/node-gguf.js";
import { repoRoot } from "./helpers/corpus.js";

async function cli(...argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = "";
  let stderr = "";
  const code = await main(argv, { stdout: (t) => (stdout += t), stderr: (t) => (stderr += t) });
  return { code, stdout, stderr };
}

let dir = "";
let good: Buffer;
/** Where things are in the good file. */
let at: {
  dataStart: number;
  firstKeyLength: number;
  firstValueType: number;
  tokensCount: number;
  tensor: (name: string) => { dims: number; type: number; offset: number };
  tensorNames: string[];
};

/** `b` with a u64 (u32) written at `pos`. */
function u64(b: Buffer, pos: number, v: bigint): Buffer {
  b.writeBigUInt64LE(v, pos);
  return b;
}
function u32(b: Buffer, pos: number, v: number): Buffer {
  b.writeUInt32LE(v, pos);
  return b;
}

/** The position just past a GGUF string (u64 length + bytes) equal to `text` in the header. */
function pastString(b: Buffer, text: string, from = 24): number {
  const bytes = Buffer.from(text);
  const needle = Buffer.concat([Buffer.alloc(8), bytes]);
  needle.writeBigUInt64LE(BigInt(bytes.length), 0);
  const i = b.indexOf(needle, from);
  assert.ok(i >= 0, `${text} not found`);
  return i + needle.length;
}

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "gguf-malformed-"));
  const file = path.join(dir, "good.gguf");
  await toGguf(path.join(repoRoot, "test/fixtures/gguf/tiny-qwen2"), file, {
    type: "Q8_0",
    tokenizerPre: "qwen2",
    threads: 0,
  });
  good = fs.readFileSync(file);
  const g = openGgufSync(file);
  const names = g.header.tensors.map((t) => t.name);
  const dataStart = g.header.tensors[0]!.fileOffset - g.header.tensors[0]!.offset;
  g.close();
  at = {
    dataStart,
    firstKeyLength: 24,
    firstValueType: pastString(good, "general.architecture"),
    tokensCount: pastString(good, "tokenizer.ggml.tokens") + 4 + 4,
    tensor: (name) => {
      const dims = pastString(good, name, 24);
      const n = good.readUInt32LE(dims);
      const type = dims + 4 + 8 * n;
      return { dims, type, offset: type + 4 };
    },
    tensorNames: names,
  };
});

after(() => {
  if (dir !== "") fs.rmSync(dir, { recursive: true, force: true });
});

/** Each damage: a name, what it does to a copy of the good file, and the code every command must give. */
const CASES: [string, (b: Buffer) => Buffer, "InvalidGguf" | "GgufLimit"][] = [
  ["magic of version 3 but big-endian", (b) => u32(b, 4, 0x03000000), "InvalidGguf"],
  ["version 1", (b) => u32(b, 4, 1), "InvalidGguf"],
  ["version 4", (b) => u32(b, 4, 4), "InvalidGguf"],
  ["tensor count 2^40", (b) => u64(b, 8, 2n ** 40n), "GgufLimit"],
  ["key-value count 2^40", (b) => u64(b, 16, 2n ** 40n), "GgufLimit"],
  ["more key-values than the header holds", (b) => u64(b, 16, b.readBigUInt64LE(16) + 3n), "InvalidGguf"],
  ["first key 2^40 bytes long", (b) => u64(b, at.firstKeyLength, 2n ** 40n), "GgufLimit"],
  ["value type 99", (b) => u32(b, at.firstValueType, 99), "InvalidGguf"],
  ["token array of 2^40 items", (b) => u64(b, at.tokensCount, 2n ** 40n), "GgufLimit"],
  ["token array longer than the file", (b) => u64(b, at.tokensCount, 1_000_000n), "InvalidGguf"],
  ["tensor of ggml type 99", (b) => u32(b, at.tensor(at.tensorNames[1]!).type, 99), "InvalidGguf"],
  ["tensor of 7 dimensions", (b) => u32(b, at.tensor(at.tensorNames[1]!).dims, 7), "InvalidGguf"],
  [
    "tensor offset not aligned",
    (b) => {
      const p = at.tensor(at.tensorNames[2]!).offset;
      return u64(b, p, b.readBigUInt64LE(p) + 1n);
    },
    "InvalidGguf",
  ],
  ["tensor past the end", (b) => u64(b, at.tensor(at.tensorNames[2]!).offset, 2n ** 40n), "InvalidGguf"],
  [
    "two tensors overlap",
    (b) => {
      const first = b.readBigUInt64LE(at.tensor(at.tensorNames[0]!).offset);
      return u64(b, at.tensor(at.tensorNames[1]!).offset, first);
    },
    "InvalidGguf",
  ],
  ["data region cut short", (b) => b.subarray(0, b.length - 100), "InvalidGguf"],
  ["cut inside the header", (b) => b.subarray(0, at.dataStart - 200), "InvalidGguf"],
];

for (const [name, damage, code] of CASES) {
  test(`malformed GGUF (${name}) is refused with ${code} by validate, inspect, hash and from-gguf`, async () => {
    const file = path.join(dir, `${name.replace(/\W+/g, "-")}.gguf`);
    fs.writeFileSync(file, damage(Buffer.from(good)));
    const validate = await cli("validate", file, "--json");
    assert.equal(validate.code, 1, validate.stdout);
    const report = JSON.parse(validate.stdout) as { ok: boolean; error: { code: string; message: string } };
    assert.equal(report.ok, false);
    assert.equal(report.error.code, code, report.error.message);
    for (const command of ["inspect", "hash"]) {
      const run = await cli(command, file);
      assert.equal(run.code, 1, `${command}: ${run.stdout}`);
      assert.match(run.stderr, new RegExp(`^error\\[${code}\\]`), `${command}: ${run.stderr}`);
    }
    const outDir = path.join(dir, "out");
    const from = await cli("from-gguf", file, outDir);
    assert.equal(from.code, 1);
    assert.match(from.stderr, new RegExp(`^error\\[${code}\\]`));
    assert.equal(fs.existsSync(outDir), false);
  });
}

test("the undamaged file passes every command (the cases above damage only what they name)", async () => {
  const file = path.join(dir, "good.gguf");
  assert.deepEqual(await cli("validate", file), { code: 0, stdout: "ok\n", stderr: "" });
  assert.equal((await cli("inspect", file)).code, 0);
  assert.equal((await cli("hash", file)).code, 0);
  const out = path.join(dir, "good-out");
  assert.equal((await cli("from-gguf", file, out)).code, 0);
  assert.ok(fs.existsSync(path.join(out, "model.safetensors")));
});
