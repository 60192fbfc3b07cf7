/**
 * Random header texts for property tests: entry-shaped objects with fields of every kind (right and wrong types,
 * numbers serde_json and JSON.parse read differently, escaped names, nesting), and arbitrary values. Mostly valid
 * JSON; `mutated` breaks some of them.
 */
import fc from "fast-check";

const name = fc.oneof(fc.string(), fc.constantFrom("__proto__", "constructor", "__metadata__", "7", "a", ""));
const number = fc.oneof(
  fc.nat(1000).map(String),
  fc.constantFrom("-1", "-0", "1.5", "1e3", "18446744073709551616", "9007199254740993", "00", "1E400"),
);
const value: fc.Arbitrary<string> = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: "small" },
    number,
    fc.constantFrom("true", "false", "null", '"s"', '"\\ud83d\\ude00"'),
    fc.array(tie("value"), { maxLength: 3 }).map((items) => `[${items.join(",")}]`),
    fc
      .array(fc.tuple(name, tie("value")), { maxLength: 3 })
      .map((members) => `{${members.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(",")}}`),
  ),
})).value;
const field = fc.oneof(
  fc.tuple(fc.constant("dtype"), fc.constantFrom('"F32"', '"U8"', '"BF16"', '"f32"', "1", '{"F32":null}')),
  fc.tuple(
    fc.constant("shape"),
    fc.array(number, { maxLength: 3 }).map((d) => `[${d.join(",")}]`),
  ),
  fc.tuple(
    fc.constant("data_offsets"),
    fc.array(number, { maxLength: 3 }).map((d) => `[${d.join(",")}]`),
  ),
  fc.tuple(name, value),
);
export const header: fc.Arbitrary<string> = fc
  .array(
    fc.tuple(
      name,
      fc.oneof(
        fc.array(field, { maxLength: 5 }).map((fs) => `{${fs.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(",")}}`),
        value,
      ),
    ),
    { maxLength: 5 },
  )
  .map((members) => `{${members.map(([k, v]) => `${JSON.stringify(k)} : ${v}`).join(",")}}`);

/** Characters that matter to a JSON scanner, inserted by {@link mutated}. */
const breaking = fc.constantFrom(
  '"',
  "\\",
  "[",
  "]",
  "{",
  "}",
  ",",
  ":",
  "\u0001",
  "\\ud800",
  "\\udc00",
  "\\u12",
  "x",
  "0",
  "-",
  ".",
  "e",
  " ",
  "é",
);

/** A header text, sometimes cut short, with a character inserted or removed. */
export const mutated: fc.Arbitrary<string> = fc
  .tuple(header, fc.nat(), fc.nat(3), breaking)
  .map(([text, at, how, insert]) => {
    const i = text.length === 0 ? 0 : at % text.length;
    if (how === 0) return text;
    if (how === 1) return text.slice(0, i);
    if (how === 2) return text.slice(0, i) + insert + text.slice(i);
    return text.slice(0, i) + text.slice(i + 1);
  });
