/**
 * s3:// locations: object URLs (virtual-hosted, path-style, custom endpoints), SigV4 signatures equal to botocore's
 * for the same requests (fixture from scripts/gen_s3_signatures.py, re-checked live when botocore is there), and
 * reads through a local S3 stand-in with credentials from the environment.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import { open, serialize, Tensor } from "../src/node.js";
import { s3ObjectUrl, signingFetch } from "../src/remote/s3.js";
import { repoRoot } from "./helpers/corpus.js";
import { type EdgeServer, startEdgeServer } from "./helpers/edge-server.js";
import { fill } from "./helpers/fill.js";
import { referencePython } from "./helpers/reference.js";
import { cli } from "./helpers/run-cli.js";

interface SignedCase {
  url: string;
  region: string;
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
  datetime: string;
  authorization: string;
}

const fixtureFile = path.join(repoRoot, "test/fixtures/s3/sigv4.json");
const fixture = JSON.parse(fs.readFileSync(fixtureFile, "utf8")) as { cases: SignedCase[] };

/** What our reader sends for one range read of `url`, signed by aws4fetch at a fixed time. */
async function signed(c: SignedCase): Promise<Headers> {
  let seen: Request | undefined;
  const sign = signingFetch(
    {
      s3Region: c.region,
      s3AccessKeyId: c.accessKeyId,
      s3SecretAccessKey: c.secretAccessKey,
      s3SessionToken: c.sessionToken,
    },
    async (input) => {
      seen = input as Request;
      return new Response("");
    },
  );
  const headers = new Headers({ Range: "bytes=0-1048575", "Accept-Encoding": "identity" });
  await sign(c.url, { headers, aws: { datetime: c.datetime } } as RequestInit);
  return seen!.headers;
}

describe("SigV4", () => {
  test("aws4fetch's Authorization equals botocore's for the same requests", async () => {
    assert.equal(fixture.cases.length, 3);
    for (const c of fixture.cases) {
      const headers = await signed(c);
      assert.equal(headers.get("authorization"), c.authorization, c.url);
      assert.equal(headers.get("x-amz-content-sha256"), "UNSIGNED-PAYLOAD");
      assert.equal(headers.get("x-amz-security-token"), c.sessionToken ?? null);
    }
  });

  test("the fixture is what botocore computes now", (t) => {
    const python = referencePython()?.python;
    const probe = python ? spawnSync(python, ["-c", "import botocore"]) : null;
    if (!python || probe?.status !== 0) {
      t.skip("botocore not installed in the reference venv (pip install boto3): fixture not re-derived");
      return;
    }
    const result = spawnSync(python, [path.join(repoRoot, "scripts/gen_s3_signatures.py"), "--stdout"], {
      encoding: "utf8",
    });
    assert.equal(result.status, 0, result.stderr);
    assert.deepEqual(JSON.parse(result.stdout).cases, fixture.cases);
  });

  test("object URLs", () => {
    assert.equal(s3ObjectUrl("s3://my-bucket/models/model.safetensors"), fixture.cases[0]!.url);
    assert.equal(
      s3ObjectUrl("s3://bucket/dir/model-00001-of-00002.safetensors", { s3Endpoint: "http://127.0.0.1:9000/" }),
      fixture.cases[1]!.url,
    );
    assert.equal(
      s3ObjectUrl("s3://my.dotted.bucket/a b/ü+=(x).safetensors", { s3Region: "eu-west-1" }),
      fixture.cases[2]!.url,
    );
    assert.throws(() => s3ObjectUrl("s3://bucket-only"), /s3:\/\/BUCKET\/KEY/);
  });
});

describe("s3:// through a local endpoint", () => {
  let server: EdgeServer;
  const bytes = serialize(new Map([["w", Tensor.fromTypedArray("U8", [5000], fill(5000, 8))]]));
  const env = {
    AWS_ENDPOINT_URL: "",
    AWS_ACCESS_KEY_ID: "AKIDTEST",
    AWS_SECRET_ACCESS_KEY: "test-secret",
    AWS_REGION: "us-west-2",
  };
  const saved: Record<string, string | undefined> = {};
  before(async () => {
    server = await startEdgeServer(new Map([["/bucket/dir/w.safetensors", { bytes, failFirst: 1 }]]));
    env.AWS_ENDPOINT_URL = server.url;
    for (const [k, v] of Object.entries(env)) {
      saved[k] = process.env[k];
      process.env[k] = v;
    }
  });
  after(async () => {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    await server.close();
  });

  test("every attempt is signed afresh; values and CLI output match the local file", async () => {
    const file = await open("s3://bucket/dir/w.safetensors", { retryDelayMs: 1 });
    assert.deepEqual((await file.getTensor("w")).data, fill(5000, 8));
    await file.close();
    assert.equal(server.requests[0]!.status, 503);
    for (const r of server.requests) {
      assert.match(
        String(r.headers.authorization),
        /^AWS4-HMAC-SHA256 Credential=AKIDTEST\/\d{8}\/us-west-2\/s3\/aws4_request, SignedHeaders=accept-encoding;host;x-amz-content-sha256;x-amz-date, Signature=[0-9a-f]{64}$/,
      );
    }
    const local = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "st-s3-")), "w.safetensors");
    fs.writeFileSync(local, bytes);
    try {
      const want = await cli("inspect", local, "--json");
      assert.equal((await cli("inspect", "s3://bucket/dir/w.safetensors", "--json")).stdout, want.stdout);
    } finally {
      fs.rmSync(path.dirname(local), { recursive: true, force: true });
    }
  });
});
