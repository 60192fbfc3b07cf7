/**
 * The shortcuts of a process's first edit give what the general paths give: whole leading rows planned without the
 * slice planner (same ranges, counts and refusals), and a zero fill encoded without the codecs (same bytes).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { canEncode, fromFloat32 } from "../src/codecs/index.js";
import { encodeScalarGroup, fillBlock } from "../src/edit/fill.js";
import { planWrite } from "../src/edit/write-plan.js";
import { DTYPES, type Dtype, dtypeOf } from "../src/format/dtypes.js";
import { parseSliceSpec } from "../src/slice/index.js";

/** What planWrite gives, or the code of what it throws. */
function outcome(run: () => ReturnType<typeof planWrite>): unknown {
  try {
    const { elementCount, byteLength, ranges, exact } = run();
    return { elementCount, byteLength, ranges, exact };
  } catch (error) {
    return { code: (error as { code?: string }).code };
  }
}

test("leading rows: the shortcut's plan equals the slice planner's (and so do the refusals)", () => {
  const bound = (rows: number) => fc.oneof(fc.constant(""), fc.integer({ min: 0, max: rows + 2 }).map(String));
  fc.assert(
    fc.property(
      fc.constantFrom<Dtype>("F16", "BF16", "F32", "U8", "BOOL", "F4", "F6_E2M3", "C64"),
      fc.array(fc.integer({ min: 0, max: 9 }), { minLength: 1, maxLength: 3 }),
      fc.nat(),
      (dtype, shape, seed) =>
        fc.assert(
          fc.property(bound(shape[0]!), bound(shape[0]!), fc.constantFrom("", " "), (a, b, pad) => {
            const spec = `${pad}${a}${pad}:${pad}${b}`;
            const direct = outcome(() => planWrite(dtype, shape, spec));
            const planned = outcome(() => planWrite(dtype, shape, parseSliceSpec(spec)));
            assert.deepEqual(direct, planned, `${dtype} ${JSON.stringify(shape)} [${spec}] (seed ${seed})`);
          }),
          { numRuns: 8, seed },
        ),
    ),
    { numRuns: 60 },
  );
  // Near misses go to the planner, which plans or refuses them as before.
  for (const spec of ["1 2:5", "1:2 3", "::", "1:5:1", " : ", "3", "+1:4", "1.0:4", "", ":9"]) {
    const direct = outcome(() => planWrite("F16", [8, 4], spec));
    assert.deepEqual(
      direct,
      outcome(() => planWrite("F16", [8, 4], parseSliceSpec(spec))),
      JSON.stringify(spec),
    );
  }
  // What the shortcut leaves to the planner still plans: steps, several axes, negative ends.
  assert.equal(planWrite("F16", [8, 4], "1:7:2").elementCount, 12);
  assert.equal(planWrite("F16", [8, 4], "-3:").ranges.length, 1);
  assert.equal(planWrite("F16", [8, 4], "2:4, 1:3").exact, false);
  assert.deepEqual(planWrite("F16", [2048, 4096], "1024:1152").ranges, [{ start: 1024 * 8192, end: 1152 * 8192 }]);
});

test("a zero fill without the codecs: the same bytes as encoding +0 (and -0 still goes through them)", () => {
  for (const dtype of DTYPES) {
    if (dtype === "F8_E8M0") continue; // no zero to encode
    const group = encodeScalarGroup(dtype, 0);
    assert.ok(
      group.every((b) => b === 0),
      dtype,
    );
    if (canEncode(dtype)) {
      const elements = (group.length * 8) / dtypeOf(dtype).bits;
      assert.deepEqual(group, fromFloat32(dtype, new Float32Array(elements)), dtype);
    }
    // Zero bytes repeated are zero elements whatever the block's length: no rounding to whole groups.
    const block = fillBlock(dtype, 0, 1000);
    assert.ok(block.length === 1000 && block.every((b) => b === 0), dtype);
  }
  assert.deepEqual(encodeScalarGroup("F16", -0), new Uint8Array([0x00, 0x80]));
  assert.deepEqual(fillBlock("BF16", 1, 4), new Uint8Array([0x80, 0x3f, 0x80, 0x3f]));
  // E8M0 has no zero: it goes to the encoder, never to the shortcut, and numpy (ml_dtypes) makes 0 its NaN.
  assert.deepEqual(encodeScalarGroup("F8_E8M0", 0), new Uint8Array([0xff]));
});
