/**
 * The header reader's JSON.parse fast path must never decide anything the strict reader would decide differently:
 * whenever it returns a result, that result equals the strict reader's; for anything the strict reader rejects, it
 * returns null.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import fc from "fast-check";
import { readHeaderJson, readHeaderJsonFast } from "../src/format/header.js";
import { corpusAvailable, corpusDir, corpusMissingReason, expectedFiles } from "./helpers/corpus.js";
import { header } from "./helpers/headers.js";

function strict(text: string) {
  try {
    return readHeaderJson(text);
  } catch {
    return null;
  }
}

function agree(text: string): void {
  const fast = readHeaderJsonFast(text);
  if (fast === null) return;
  assert.deepStrictEqual(fast, strict(text), text);
}

test("fast path agrees on real headers, and takes them", {
  skip: corpusAvailable ? false : corpusMissingReason,
}, () => {
  let taken = 0;
  for (const { file } of expectedFiles()) {
    const bytes = fs.readFileSync(path.join(corpusDir, file));
    if (bytes.length < 8) continue;
    const n = Number(bytes.readBigUInt64LE(0));
    if (8 + n > bytes.length) continue;
    const text = bytes.subarray(8, 8 + n).toString("utf8");
    agree(text);
    if (readHeaderJsonFast(text) !== null) taken++;
  }
  assert.ok(taken >= 25, `fast path taken for only ${taken} corpus headers`);
});

test("fast path returns null for what it cannot judge", () => {
  const entry = '{"dtype":"F32","shape":[1],"data_offsets":[0,4]}';
  for (const text of [
    `{"a":${entry},"a":${entry}}`,
    `{"__metadata__":{"k":"1","k":"2"}}`,
    `{"__metadata__":null,"__metadata__":null}`,
    `{"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}`,
    `{"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}}`,
    `{"a":{"dtype":"F32","shape":[-0],"data_offsets":[0,0]}}`,
    `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1.7976931348623158e308}}`,
    `{"a":{"dtype":"F32","shape":[18446744073709551615,0],"data_offsets":[0,0]}}`,
    `{"\\ud800":${entry}}`,
    `{"a":["F32",[1],[0,4]]}`,
    `{"a":{"dtype":{"F32":null},"shape":[1],"data_offsets":[0,4]}}`,
    `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":${"[".repeat(126)}${"]".repeat(126)}}}`,
    `{"1":${entry},"a":${entry}}`,
    `[]`,
    `{"a":${entry}} x`,
  ]) {
    assert.equal(readHeaderJsonFast(text), null, text);
  }
  // …and takes the ordinary ones.
  assert.notEqual(readHeaderJsonFast(`{"__metadata__":{"format":"pt"},"a":${entry}, "b" : ${entry} }`), null);
  assert.notEqual(readHeaderJsonFast(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":[[{"y":[]}]]}}`), null);
});

test("fast path agrees with the strict reader on random headers", () => {
  fc.assert(
    fc.property(header, (text) => agree(text)),
    { seed: 20261130, numRuns: 3000 },
  );
});
