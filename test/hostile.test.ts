/**
 * Hostile headers (bench/hostile-cases.ts), built small here (and a few past the size where they once crashed):
 * every one gets the reference's verdict — recorded by scripts/gen_hostile_verdicts.ts in
 * test/fixtures/hostile-verdicts.jsonl — with the error code that verdict maps to, or our deliberately stricter
 * DuplicateKey; never another exception. Timing is the benchmark's job (bench/hostile.ts), not this test's.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { buildHostileFile, HOSTILE_CASES, testSizes } from "../bench/hostile-cases.js";
import { expectedCodes, refClass } from "../scripts/reference-errors.js";
import { deserialize, isSafetensorError } from "../src/index.js";

interface Recorded {
  id: string;
  size: number;
  ok: boolean;
  error: string | null;
}

const fixture = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures", "hostile-verdicts.jsonl");
const recorded = fs
  .readFileSync(fixture, "utf8")
  .trim()
  .split("\n")
  .map((line) => JSON.parse(line) as Recorded);

test("every hostile case and size has a recorded reference verdict", () => {
  const expected = HOSTILE_CASES.flatMap((c) => testSizes(c).map((size) => `${c.id}@${size}`)).sort();
  const have = recorded.map((r) => `${r.id}@${r.size}`).sort();
  assert.deepEqual(have, expected, "rerun scripts/gen_hostile_verdicts.ts");
});

for (const hostile of HOSTILE_CASES) {
  for (const size of testSizes(hostile)) {
    test(`${hostile.id} (${size} bytes): ${hostile.what}`, () => {
      const reference = recorded.find((r) => r.id === hostile.id && r.size === size);
      assert.ok(reference, "no recorded verdict");
      const file = buildHostileFile(hostile, size);
      let code: string | null = null;
      try {
        deserialize(file);
      } catch (error) {
        if (!isSafetensorError(error)) throw error; // a crash: RangeError, TypeError, …
        code = error.code;
      }
      if (hostile.stricter && reference.ok) {
        assert.equal(code, hostile.stricter, "refused on purpose where the reference keeps the last value");
      } else if (reference.ok) {
        assert.equal(code, null, "the reference accepts this file");
      } else {
        const codes = expectedCodes(refClass(reference.error));
        assert.ok(codes, `unclassified reference error: ${reference.error}`);
        assert.ok(code !== null && codes.includes(code), `got ${code}, the reference says: ${reference.error}`);
      }
    });
  }
}
