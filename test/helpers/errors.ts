/** `assert.throws` / `assert.rejects` validator: a SafetensorError with this code. */
import assert from "node:assert/strict";
import { isSafetensorError } from "../../src/node.js";

export const hasCode = (expected: string) => (error: unknown) => {
  assert.ok(isSafetensorError(error), `not a SafetensorError: ${error}`);
  assert.equal(error.code, expected, error.message);
  return true;
};
