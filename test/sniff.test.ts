/** Format sniffing: every kind of file people mistake for safetensors, from synthetic bytes and the real corpus. */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, test } from "node:test";
import { OTHER_FORMAT_CODES, SNIFF_BYTES, sniff } from "../src/format/sniff.js";
import { serialize, Tensor } from "../src/node.js";
import { corpusAvailable, corpusDir, corpusMissingReason } from "./helpers/corpus.js";

const text = (s: string) => new TextEncoder().encode(s);
const bytes = (...parts: (number[] | Uint8Array | string)[]) => {
  const chunks = parts.map((p) => (typeof p === "string" ? text(p) : Uint8Array.from(p)));
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
};

/** A zip local file header naming `name` first, as torch.save and numpy.savez write it. */
function zipWithFirstEntry(name: string): Uint8Array {
  const header = new Uint8Array(30);
  header.set([0x50, 0x4b, 0x03, 0x04]);
  header[26] = name.length;
  return bytes(header, name, new Array(64).fill(0x5a));
}

function tarWithFirstMember(name: string): Uint8Array {
  const block = new Uint8Array(512);
  block.set(text(name));
  block.set(text("ustar\u000000"), 257);
  return block;
}

describe("sniff", () => {
  const cases: [string, Uint8Array, string, object?][] = [
    ["safetensors", serialize({ a: Tensor.fromFloat32("F32", [2], [1, 2]) }), "safetensors"],
    ["empty", new Uint8Array(0), "empty"],
    ["torch zip", zipWithFirstEntry("archive/data.pkl"), "pytorch-zip"],
    ["torch zip, newer first record", zipWithFirstEntry("model/.format_version"), "pytorch-zip"],
    ["npz", zipWithFirstEntry("weights.npy"), "numpy-npz"],
    ["other zip", zipWithFirstEntry("readme.txt"), "zip"],
    [
      "legacy torch",
      bytes([0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, 0x2e]),
      "pytorch-legacy",
    ],
    ["pickle protocol 4", bytes([0x80, 0x04, 0x95, 0, 0, 0, 0, 0, 0, 0, 0, 0x7d, 0x94, 0x2e]), "pickle"],
    ["torch tar", tarWithFirstMember("sys_info"), "pytorch-tar"],
    [
      "index",
      text('{\n  "metadata": {"total_size": 4},\n  "weight_map": {"a": "model-00001-of-00002.safetensors"}}'),
      "json-index",
    ],
    ["index by name", text('{"metadata": {}}'), "json-index", { name: "x/model.safetensors.index.json" }],
    ["config", text('{"architectures": ["LlamaForCausalLM"]}'), "json"],
    ["gguf", bytes("GGUF", [3, 0, 0, 0], new Array(16).fill(0)), "gguf"],
    ["lfs", text("version https://git-lfs.github.com/spec/v1\noid sha256:4d7a\nsize 2200119864\n"), "git-lfs-pointer"],
    ["html", text("\n  <!DOCTYPE html>\n<html lang=en><head><title>model.safetensors · Hugging Face</title>"), "html"],
    ["html with BOM", text("\uFEFF<html><body>"), "html"],
    [
      "npy",
      bytes([0x93], "NUMPY", [1, 0, 0x76, 0], "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }"),
      "numpy",
    ],
    ["hdf5", bytes([0x89], "HDF\r\n\x1a\n", [0, 0, 0]), "hdf5"],
    ["gzip", bytes([0x1f, 0x8b, 8, 0]), "gzip"],
    ["text", text("root:x:0:0:root:/root:/bin/bash\n\tdaemon:x:1:1\r\n"), "text"],
    ["random", bytes([0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 3, 4, 5]), "unknown"],
    [
      "a header length too large for the file",
      bytes([0xff, 0xff, 0, 0, 0, 0, 0, 0], "{}"),
      "unknown",
      { fileLength: 10 },
    ],
  ];
  for (const [label, head, format, options] of cases) {
    test(label, () => assert.equal(sniff(head.subarray(0, SNIFF_BYTES), options).format, format));
  }

  test("directories; descriptions are phrases; the LFS pointer's size", () => {
    assert.equal(sniff(new Uint8Array(0), { isDirectory: true }).format, "directory");
    const lfs = sniff(text("version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 42\n"));
    assert.equal(lfs.size, 42);
    assert.match(lfs.description, /^a Git LFS pointer file \(the real file, 42 bytes, was not downloaded\)$/);
    for (const [, head, , options] of cases)
      assert.match(sniff(head, options).description, /^(a|an|not|gzip-compressed) /);
  });

  test("the header errors another format can cause: those before the entries are examined", () => {
    assert.deepEqual(
      [...OTHER_FORMAT_CODES],
      [
        "HeaderTooSmall",
        "HeaderTooLarge",
        "InvalidHeaderLength",
        "InvalidHeaderUtf8",
        "InvalidHeaderJson",
        "InvalidHeaderStructure",
      ],
    );
  });

  test("a cut multi-byte character at the end of the head is still text", () => {
    const head = text(`{"weight_map": {"é${"x".repeat(SNIFF_BYTES)}`).subarray(0, 17);
    assert.equal(sniff(head).format, "json-index");
  });
});

describe("sniff the corpus", { skip: corpusAvailable ? false : corpusMissingReason }, () => {
  const head = (file: string) => {
    const fd = fs.openSync(file, "r");
    try {
      const buffer = new Uint8Array(SNIFF_BYTES);
      return buffer.subarray(0, fs.readSync(fd, buffer, 0, SNIFF_BYTES, 0));
    } finally {
      fs.closeSync(fd);
    }
  };
  const expected = (name: string) => {
    if (name.endsWith(".index.json")) return "json-index";
    if (name.startsWith("FAIL-cpp")) return "unknown"; // its length field points past the end
    if (name.endsWith(".safetensors")) return "safetensors";
    return name.includes("legacy") ? "pytorch-legacy" : "pytorch-zip";
  };
  const files = corpusAvailable
    ? fs
        .readdirSync(corpusDir, { recursive: true, encoding: "utf8" })
        .filter((f) => /\.(safetensors|pt|pth|bin|json)$/.test(f))
    : [];
  test("every real file is named for what it is", () => {
    assert.ok(files.length >= 40, `only ${files.length} files`);
    for (const name of files) {
      const file = path.join(corpusDir, name);
      assert.equal(sniff(head(file), { name, fileLength: fs.statSync(file).size }).format, expected(name), name);
    }
    assert.equal(
      sniff(new Uint8Array(0), { isDirectory: fs.statSync(path.join(corpusDir, "julia-test-sharded-6")).isDirectory() })
        .format,
      "directory",
    );
  });
});
