/**
 * The CLI on URLs: `inspect`, `hash`, `validate` and `get` print for an http:// or hf:// location exactly what they
 * print for the local file, with one request per header; a file changed while being read is reported, not mixed.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import { serialize, Tensor } from "../src/node.js";
import { corpusAvailable, corpusDir, corpusMissingReason, expectedFiles } from "./helpers/corpus.js";
import { type EdgeServer, startEdgeServer } from "./helpers/edge-server.js";
import { fill } from "./helpers/fill.js";
import { type Nginx, nginxBinary, nginxMissingReason, startNginx } from "./helpers/nginx.js";
import { cli } from "./helpers/run-cli.js";

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-cli-remote-"));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

/** Run with some environment variables set, restoring them afterwards. */
async function withEnv<T>(vars: Record<string, string>, fn: () => Promise<T>): Promise<T> {
  const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  Object.assign(process.env, vars);
  try {
    return await fn();
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

describe("cli over nginx", {
  skip: nginxBinary === null ? nginxMissingReason : corpusAvailable ? false : corpusMissingReason,
}, () => {
  let nginx: Nginx;
  before(async () => {
    nginx = (await startNginx({ "/corpus/": corpusDir, "/hf/org/repo/resolve/main/": corpusDir }))!;
  });
  after(() => nginx?.stop());

  test("inspect --json and hash --json equal the local results; one request per header", async () => {
    for (const expected of expectedFiles()) {
      const local = path.join(corpusDir, expected.file);
      const url = `${nginx.url}/corpus/${encodeURIComponent(expected.file)}`;
      const size = fs.statSync(local).size;
      for (const command of ["inspect", "hash"]) {
        const want = await cli(command, local, "--json");
        await nginx.clearLog();
        const got = await cli(command, url, "--json");
        assert.equal(got.code, want.code, `${command} ${expected.file}: ${got.stderr}`);
        assert.equal(got.stdout, want.stdout, `${command} ${expected.file}`);
        assert.equal(got.stderr, want.stderr, `${command} ${expected.file}`);
        const log = await nginx.log();
        if (command === "inspect" || size <= 1 << 20) assert.equal(log.length, 1, `${command} ${expected.file}`);
        // hash reads every byte once: the first MiB, then the rest.
        if (command === "hash" && want.code === 0) {
          assert.equal(
            log.reduce((sum, e) => sum + e.bytes, 0),
            size,
            expected.file,
          );
        }
      }
    }
  });

  test("validate and get take URLs; hf:// resolves through HF_ENDPOINT", async () => {
    const files = expectedFiles();
    const bad = files.find((f) => !f.ok)!;
    const good = files.find((f) => f.ok && (f.tensors?.length ?? 0) > 0)!;
    const badLocal = await cli("validate", path.join(corpusDir, bad.file));
    const badRemote = await cli("validate", `${nginx.url}/corpus/${bad.file}`);
    assert.equal(badRemote.code, 1);
    assert.equal(badRemote.stderr, badLocal.stderr);
    assert.equal((await cli("validate", `${nginx.url}/corpus/${good.file}`)).stdout, "ok\n");
    const name = good.tensors![0]!.name;
    const outLocal = path.join(tmp, "local.bin");
    const outRemote = path.join(tmp, "remote.bin");
    assert.equal((await cli("get", path.join(corpusDir, good.file), name, "--out", outLocal)).code, 0);
    await withEnv({ HF_ENDPOINT: `${nginx.url}/hf` }, async () => {
      const result = await cli("get", `hf://org/repo/${good.file}`, name, "--out", outRemote);
      assert.equal(result.code, 0, result.stderr);
    });
    assert.deepEqual(fs.readFileSync(outRemote), fs.readFileSync(outLocal));
    const log = await nginx.log();
    assert.equal(log[log.length - 1]!.path, `/hf/org/repo/resolve/main/${good.file}`);
  });
});

describe("cli over misbehaving servers", () => {
  let server: EdgeServer;
  const big = serialize(
    new Map([
      ["a", Tensor.fromTypedArray("U8", [3 << 20], fill(3 << 20, 1))],
      ["b", Tensor.fromTypedArray("U8", [3 << 20], fill(3 << 20, 2))],
    ]),
  );
  const changed = big.slice();
  changed[changed.length - 1]! ^= 0xff;
  before(async () => {
    server = await startEdgeServer();
  });
  after(() => server.close());

  test("a file changed mid-read is reported, not mixed", async () => {
    server.files.set("/m.safetensors", {
      bytes: big,
      etag: '"one"',
      next: { after: 1, served: { bytes: changed, etag: '"two"' } },
    });
    const result = await cli("hash", `${server.url}/m.safetensors`, "--json");
    assert.equal(result.code, 1);
    assert.equal(result.stdout, "");
    assert.match(result.stderr, /^error\[SourceChanged\]: .*changed while being read: ETag "one" at open, now "two"/);
  });

  test("a server ignoring Range gives the same hash; HF_TOKEN is sent as a bearer token", async () => {
    const local = path.join(tmp, "big.safetensors");
    fs.writeFileSync(local, big);
    const want = await cli("hash", local, "--json");
    server.files.set("/ignore.safetensors", { bytes: big, mode: "ignore-range" });
    assert.equal((await cli("hash", `${server.url}/ignore.safetensors`, "--json")).stdout, want.stdout);
    server.files.set("/org/private/resolve/v1/big.safetensors", { bytes: big, authorization: "Bearer hf_test" });
    await withEnv({ HF_ENDPOINT: server.url, HF_TOKEN: "hf_test" }, async () => {
      const got = await cli("hash", "hf://org/private@v1/big.safetensors", "--json");
      assert.equal(got.stdout, want.stdout, got.stderr);
    });
  });
});
