/**
 * GGUF over HTTP: to-gguf of a model folder served over HTTP gives the local conversion's bytes; openGguf reads a
 * remote header in one request when it fits in the first read; from-gguf reads a remote GGUF.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import { toGguf } from "../src/gguf/node-convert.js";
import { fromGguf } from "../src/gguf/node-from-gguf.js";
import { openGguf } from "../src/gguf/node-gguf.js";
import { repoRoot } from "./helpers/corpus.js";
import { startEdgeServer } from "./helpers/edge-server.js";

const FIXTURES = path.join(repoRoot, "test/fixtures/gguf");
const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

test("to-gguf of a model served over HTTP equals the local conversion; openGguf reads its header in one request", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gguf-remote-"));
  const server = await startEdgeServer();
  try {
    const model = path.join(FIXTURES, "tiny-qwen2");
    for (const file of fs.readdirSync(model)) {
      server.files.set(`/models/tiny-qwen2/${file}`, { bytes: fs.readFileSync(path.join(model, file)) });
    }
    const local = path.join(dir, "local.gguf");
    const remote = path.join(dir, "remote.gguf");
    await toGguf(model, local, { type: "Q8_0", threads: 0, tokenizerPre: "qwen2" });
    await toGguf(`${server.url}/models/tiny-qwen2/`, remote, { type: "Q8_0", threads: 0, tokenizerPre: "qwen2" });
    assert.equal(sha(fs.readFileSync(remote)), sha(fs.readFileSync(local)));

    server.files.set("/files/model.gguf", { bytes: fs.readFileSync(local) });
    const before = server.requests.length;
    const g = await openGguf(`${server.url}/files/model.gguf`);
    try {
      assert.equal(server.requests.length - before, 1, "one request for the header");
      assert.equal(g.headerReads, 1);
      assert.equal(g.header.metadata.get("general.architecture")?.value, "qwen2");
      const back = path.join(dir, "back");
      await fromGguf(`${server.url}/files/model.gguf`, back);
      const again = path.join(dir, "back-local");
      await fromGguf(local, again);
      assert.equal(
        sha(fs.readFileSync(path.join(back, "model.safetensors"))),
        sha(fs.readFileSync(path.join(again, "model.safetensors"))),
      );
    } finally {
      await g.close();
    }
  } finally {
    await server.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
