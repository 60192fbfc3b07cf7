/**
 * Differential fuzzer: our header parser against the reference implementation (Python `safetensors` 0.8.0).
 * Run by hand (not part of `npm test`):
 *
 *   npx tsx scripts/diff_fuzz.ts --cases 20000 [--seed 1] [--batch 2000] [--out DIR] [--no-minimize]
 *
 * It generates malformed and edge-case files from a structured generator over the JSON grammar and the format rules
 * (numbers in odd forms, escapes, nesting depth near 127/128, duplicate keys, array-form entries, missing/extra fields,
 * offset gaps/overlaps/zero-size ties, huge dims, dtype names, whitespace kinds, UTF-8 edge cases, BOM, NUL, header
 * length edits), writes them in batches, has the reference judge each batch in one long-lived python process
 * (scripts/diff_fuzz.py), and compares ok/fail verdicts. Known, intended differences — duplicate tensor names and
 * duplicate metadata keys, which we refuse and the reference resolves last-wins — are counted, not reported.
 *
 * Every other disagreement is grouped, and the first of each group is minimized (token-level deletion, checked
 * against both implementations) into a reproducer. It also tabulates reference error text → our error code and
 * reports pairs that break the expected mapping. Exit status 1 when an unexpected disagreement or a non-SafetensorError
 * exception shows up.
 */
import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import * as readline from "node:readline";
import { fileURLToPath } from "node:url";
import { DTYPES, deserialize, isSafetensorError } from "../src/index.js";
import { referenceMissingReason, referencePython } from "../test/helpers/reference.js";
import { expectedCodes, refClass } from "./reference-errors.js";

const here = path.dirname(fileURLToPath(import.meta.url));

// ------------------------------------------------------------------------------------------------ options

function option(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1]! : fallback;
}
const CASES = Number(option("cases", "20000"));
const SEED = Number(option("seed", "1"));
const BATCH = Number(option("batch", "2000"));
const OUT = process.argv.includes("--out")
  ? path.resolve(option("out", "."))
  : fs.mkdtempSync(path.join(os.tmpdir(), "st-diff-fuzz-"));
fs.mkdirSync(OUT, { recursive: true });
const MINIMIZE = !process.argv.includes("--no-minimize");

// ------------------------------------------------------------------------------------------------ randomness

class Rng {
  private s: number;
  constructor(seed: number) {
    this.s = seed >>> 0 || 0x9e3779b9;
  }
  /** mulberry32 */
  u32(): number {
    this.s = (this.s + 0x6d2b79f5) >>> 0;
    let t = this.s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  }
  float(): number {
    return this.u32() / 2 ** 32;
  }
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.float() * (hi - lo + 1));
  }
  chance(p: number): boolean {
    return this.float() < p;
  }
  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.float() * items.length)]!;
  }
  shuffle<T>(items: T[]): T[] {
    for (let i = items.length - 1; i > 0; i--) {
      const j = Math.floor(this.float() * (i + 1));
      [items[i], items[j]] = [items[j]!, items[i]!];
    }
    return items;
  }
}

// ------------------------------------------------------------------------------------------------ generator

const BITS: Record<string, number> = {
  BOOL: 8,
  F4: 4,
  F6_E2M3: 6,
  F6_E3M2: 6,
  U8: 8,
  I8: 8,
  F8_E5M2: 8,
  F8_E4M3: 8,
  F8_E8M0: 8,
  F8_E4M3FNUZ: 8,
  F8_E5M2FNUZ: 8,
  I16: 16,
  U16: 16,
  F16: 16,
  BF16: 16,
  I32: 32,
  U32: 32,
  F32: 32,
  C64: 64,
  F64: 64,
  I64: 64,
  U64: 64,
};
const BAD_DTYPES = [
  "E8M0",
  "FP4",
  "UE8",
  "f32",
  "bf16",
  "F32 ",
  " F32",
  "",
  "F8_E4M3FN",
  "FLOAT32",
  "F6",
  "B0OL",
  "f4",
];

const NAMES = [
  "a",
  "b",
  "c",
  "weight",
  "layer.0.weight",
  "layer.10.bias",
  "",
  " ",
  "__proto__",
  "constructor",
  "toString",
  "__metadata",
  "__metadata___",
  "é",
  "日本",
  "\u{1F600}",
  "\u{10FFFF}",
  "\u{10000}",
  "\uE000",
  "\uFFFF",
  "\uFFFE",
  "\uFEFF",
  "\u2028",
  "\u0085",
  "\x7f",
  'q"uote',
  "back\\slash",
  "/",
  "\u0000",
  "\x1f",
  "\t",
];

const FLOAT_EDGES = [
  "1.7976931348623157e308",
  "1.7976931348623158e308",
  "1.797693134862315708e308",
  "1.7976931348623157081e308",
  "1.7976931348623159e308",
  "17976931348623157e292",
  "17976931348623158e292",
  `179769313486231570${"0".repeat(291)}`,
  `179769313486231580${"0".repeat(291)}`,
  `179769313486231581${"0".repeat(291)}`,
  "1e308",
  "1e309",
  "-1e309",
  "-1.7976931348623158e308",
  "2.2250738585072014e-308",
  "4.9e-324",
  "2.4703282292062328e-324",
  "1e-400",
  "0e99999999999999999999",
  "1e99999999999999999999",
  "0.0000000000000000000000000001e330",
  "123456789012345678901234567890",
  "18446744073709551615",
  "18446744073709551616",
  "-9223372036854775808",
  "-9223372036854775809",
  "-0",
  "-0.0",
  "0.1e1",
  "1E+2",
  "1e-2",
  "-1",
];

const WS_OK = [" ", "\t", "\n", "\r"];
const WS_BAD = ["\f", "\v", "\u00a0", "\u2028", "\ufeff", "\u0085", "\u3000"];

const UTF8_EDGES: number[][] = [
  [0xc2, 0x80],
  [0xdf, 0xbf],
  [0xe0, 0xa0, 0x80],
  [0xef, 0xbf, 0xbf],
  [0xef, 0xbf, 0xbe],
  [0xf0, 0x90, 0x80, 0x80],
  [0xf4, 0x8f, 0xbf, 0xbf],
  [0xef, 0xbb, 0xbf],
  [0xc0, 0x80],
  [0xc1, 0xbf],
  [0xe0, 0x80, 0x80],
  [0xed, 0xa0, 0x80],
  [0xed, 0xbf, 0xbf],
  [0xf0, 0x80, 0x80, 0x80],
  [0xf4, 0x90, 0x80, 0x80],
  [0xf5, 0x80, 0x80, 0x80],
  [0xff],
  [0xfe],
  [0x80],
  [0xbf],
  [0xe2, 0x82],
  [0xf0, 0x9f, 0x98],
  [0x00],
];

const HUGE = [
  2n ** 32n,
  2n ** 40n,
  2n ** 53n - 1n,
  2n ** 53n + 1n,
  2n ** 61n,
  2n ** 62n,
  2n ** 63n,
  2n ** 64n - 1n,
  2n ** 64n,
  10n ** 20n,
];

interface Flags {
  duplicateNames: boolean;
  duplicateMetadataKeys: boolean;
}

interface Generated {
  bytes: Uint8Array;
  /** Header text before byte-level edits (for minimization), or null. */
  text: string;
  dataLength: number;
  exactN: boolean;
  flags: Flags;
  tags: string[];
}

class Gen {
  constructor(
    private rng: Rng,
    private tags: string[],
  ) {}
  badWs = false;

  ws(): string {
    const r = this.rng;
    if (r.chance(0.75)) return "";
    let out = "";
    for (let i = r.int(1, 3); i > 0; i--) out += this.badWs && r.chance(0.15) ? r.pick(WS_BAD) : r.pick(WS_OK);
    return out;
  }

  /** A JSON string token for `s`, escaped in random (valid) ways, rarely corrupted. */
  str(s: string, corrupt = 0.01): string {
    const r = this.rng;
    const escapeRate = r.chance(0.2) ? 0.3 : 0;
    let out = '"';
    for (const ch of s) {
      const cp = ch.codePointAt(0)!;
      const hex = (n: number) => {
        const h = n.toString(16).padStart(4, "0");
        return `\\u${r.chance(0.5) ? h : h.toUpperCase()}`;
      };
      if (ch === '"') out += r.chance(0.8) ? '\\"' : hex(cp);
      else if (ch === "\\") out += r.chance(0.8) ? "\\\\" : hex(cp);
      else if (cp < 0x20) {
        const short: Record<number, string> = { 8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r" };
        out += short[cp] && r.chance(0.5) ? short[cp] : hex(cp);
      } else if (ch === "/" && r.chance(0.3)) out += "\\/";
      else if (r.chance(escapeRate)) {
        if (cp > 0xffff) {
          const v = cp - 0x10000;
          out += hex(0xd800 + (v >> 10)) + hex(0xdc00 + (v & 0x3ff));
        } else out += hex(cp);
      } else out += ch;
    }
    if (r.chance(corrupt)) {
      this.tags.push("corrupt-string");
      out += r.pick([
        "\\ud800",
        "\\udc00",
        "\\ud800\\u0041",
        "\\ud800x",
        "\\udbff\\udfff",
        "\\ud83d\\ude00",
        "\\x41",
        "\\U0041",
        "\\u12",
        "\\u12g4",
        "\x01",
        "\u0000",
        "\x7f",
        "\\'",
        "\\a",
      ]);
    }
    return `${out}"`;
  }

  /** A u64 field value in decimal, rarely in an odd form. */
  uint(v: bigint): string {
    const r = this.rng;
    if (!r.chance(0.04)) return v.toString();
    this.tags.push("odd-number");
    return r.pick([
      `0${v}`,
      `${v}.0`,
      `${v}e0`,
      `${v}E+0`,
      `+${v}`,
      `-${v}`,
      v === 0n ? "-0" : `${v}.`,
      `0x${v.toString(16)}`,
      v > 0n && v % 10n === 0n ? `${v / 10n}e1` : `${v}.00`,
      `${v}.5`,
      `"${v}"`,
      "null",
      "true",
      `[${v}]`,
      " ",
      `${v}${r.pick(["", " ", "\n"])}`,
    ]);
  }

  floatEdge(): string {
    const r = this.rng;
    if (r.chance(0.5)) return r.pick(FLOAT_EDGES);
    // Hunt the overflow boundary: 16-21 significant digits near f64::MAX.
    const digits = r.int(16, 21);
    let mantissa = "17976931348623";
    while (mantissa.length < digits) mantissa += String(r.int(0, 9));
    const forms = [
      `${mantissa[0]}.${mantissa.slice(1)}e308`,
      `${mantissa}e${308 - (digits - 1)}`,
      `0.${mantissa}e309`,
      `${mantissa}${"0".repeat(309 - digits)}`,
    ];
    return r.pick(forms);
  }

  /** A random JSON value for an ignored field; depth counts levels already open. */
  value(depth: number): string {
    const r = this.rng;
    if (r.chance(0.04)) {
      // Nesting near the 127-level limit.
      const target = r.pick([125, 126, 127, 128, 129]);
      const levels = Math.max(1, target - depth);
      this.tags.push(`nest-${depth + levels}`);
      const open = r.chance(0.5) ? "[" : '{"k":';
      const close = open === "[" ? "]" : "}";
      return open.repeat(levels - 1) + (open === "[" ? "[]" : "{}") + close.repeat(levels - 1);
    }
    const kind = r.int(0, 9);
    switch (kind) {
      case 0:
        return "null";
      case 1:
        return r.pick(["true", "false"]);
      case 2:
      case 3:
        this.tags.push("float-edge");
        return this.floatEdge();
      case 4:
        return String(r.int(-1000, 1000));
      case 5:
        return this.str(r.pick(NAMES), 0.05);
      case 6:
        if (depth > 6) return "0";
        return `[${this.ws()}${Array.from({ length: r.int(0, 3) }, () => this.value(depth + 1)).join(`,${this.ws()}`)}${this.ws()}]`;
      case 7:
        if (depth > 6) return "{}";
        return `{${Array.from({ length: r.int(0, 3) }, () => `${this.str(r.pick(NAMES))}:${this.value(depth + 1)}`).join(",")}}`;
      default:
        return r.pick(["0", "1", "1.5", "-0", "1e5", "18446744073709551616"]);
    }
  }

  header(): { text: string; flags: Flags; dataLength: number } {
    const r = this.rng;
    const tags = this.tags;
    const flags: Flags = { duplicateNames: false, duplicateMetadataKeys: false };
    this.badWs = r.chance(0.03);
    if (this.badWs) tags.push("bad-ws");

    // Tensors.
    const count = r.pick([0, 1, 1, 2, 2, 3, 3, 4, 5]);
    const names = new Set<string>();
    const tensors: { name: string; dtype: string; shape: bigint[]; size: bigint }[] = [];
    for (let i = 0; i < count; i++) {
      let name = r.chance(0.5) ? r.pick(NAMES) : `t${i}`;
      while (names.has(name)) name += String(i);
      names.add(name);
      const dtype = r.chance(0.93) ? r.pick(DTYPES) : r.pick(BAD_DTYPES);
      if (!(dtype in BITS)) tags.push("bad-dtype");
      const rank = r.pick([0, 1, 1, 1, 2, 2, 3, 4]);
      const shape: bigint[] = [];
      for (let d = 0; d < rank; d++) {
        if (r.chance(0.03)) {
          tags.push("huge-dim");
          shape.push(r.pick(HUGE));
        } else shape.push(BigInt(r.pick([0, 1, 1, 2, 2, 3, 4, 5, 8])));
      }
      if (r.chance(0.02)) {
        tags.push("huge-pair");
        shape.splice(
          0,
          shape.length,
          ...r.pick([
            [2n ** 40n, 2n ** 40n, 0n],
            [0n, 2n ** 40n, 2n ** 40n],
            [2n ** 32n, 2n ** 32n],
            [2n ** 64n - 1n, 0n],
            [2n ** 61n],
          ]),
        );
      }
      const elements = shape.reduce((a, b) => a * b, 1n);
      const size = (elements * BigInt(BITS[dtype] ?? 8)) / 8n;
      tensors.push({ name, dtype, shape, size });
    }
    // Layout in a random order; sometimes perturbed.
    const layout = r.shuffle(tensors.map((_, i) => i));
    const offsets = new Map<number, [bigint, bigint]>();
    let at = 0n;
    for (const i of layout) {
      offsets.set(i, [at, at + tensors[i]!.size]);
      at += tensors[i]!.size;
    }
    if (tensors.length > 0 && r.chance(0.15)) {
      tags.push("offset-edit");
      const i = r.int(0, tensors.length - 1);
      const [b, e] = offsets.get(i)!;
      offsets.set(
        i,
        r.pick([
          [b + 1n, e + 1n],
          [b, e + 1n],
          [b, e - 1n],
          [e, b],
          [0n, e - b],
          [b - 1n, e],
          [b, b],
          [b + 2n ** 64n - 1n, e],
          [2n ** 53n + 1n, 2n ** 53n + 1n + (e - b)],
          [b, 2n ** 64n - 1n],
        ] as [bigint, bigint][]),
      );
    }
    let dataLength = Number(at <= 1n << 16n ? at : BigInt(r.int(0, 64)));
    if (r.chance(0.08)) {
      tags.push("data-length-edit");
      dataLength = Math.max(0, dataLength + r.pick([-2, -1, 1, 2, 8]));
    }

    // Entries.
    const members: string[] = [];
    const entryFor = (i: number): string => {
      const t = tensors[i]!;
      const [b, e] = offsets.get(i)!;
      let dtypeTok = this.str(t.dtype);
      if (r.chance(0.03)) {
        tags.push("dtype-form");
        dtypeTok = r.pick([
          `{${this.str(t.dtype)}:null}`,
          `{${this.str(t.dtype)}:[]}`,
          `{${this.str(t.dtype)}:{}}`,
          `[${this.str(t.dtype)}]`,
          "null",
          "8",
          `{${this.str(t.dtype)}:null,"F32":null}`,
        ]);
      }
      let shapeTok = `[${t.shape.map((d) => this.uint(d)).join(`,${this.ws()}`)}]`;
      if (r.chance(0.02)) {
        tags.push("shape-form");
        shapeTok = r.pick(["null", "{}", "1", '"[1]"', `[${shapeTok}]`]);
      }
      let offTok = `[${this.ws()}${this.uint(b)},${this.ws()}${this.uint(e)}${this.ws()}]`;
      if (r.chance(0.02)) {
        tags.push("offsets-form");
        offTok = r.pick([`[${b}]`, `[${b},${e},${e}]`, "[]", `{"0":${b},"1":${e}}`, "null"]);
      }
      if (r.chance(0.06)) {
        tags.push("array-form");
        const parts = [dtypeTok, shapeTok, offTok];
        if (r.chance(0.2)) parts.push(this.value(3));
        if (r.chance(0.1)) parts.pop();
        return `[${this.ws()}${parts.join(`,${this.ws()}`)}${this.ws()}]`;
      }
      if (r.chance(0.02)) {
        tags.push("entry-junk");
        return this.value(2);
      }
      const fields: [string, string][] = [
        ["dtype", dtypeTok],
        ["shape", shapeTok],
        ["data_offsets", offTok],
      ];
      if (r.chance(0.3)) r.shuffle(fields);
      if (r.chance(0.03)) {
        tags.push("missing-field");
        fields.splice(r.int(0, 2), 1);
      }
      if (r.chance(0.03)) {
        tags.push("duplicate-field");
        fields.splice(r.int(0, fields.length), 0, r.pick(fields));
      }
      for (let k = r.chance(0.1) ? r.int(1, 3) : 0; k > 0; k--) {
        tags.push("extra-field");
        const key = r.chance(0.7)
          ? r.pick(["x", "extra", "offsets", "Dtype", "dtype ", "__metadata__", "__proto__", "x"])
          : r.pick(NAMES);
        fields.splice(r.int(0, fields.length), 0, [key, this.value(3)]);
      }
      return `{${this.ws()}${fields.map(([k, v]) => `${this.str(k)}${this.ws()}:${this.ws()}${v}`).join(`${this.ws()},${this.ws()}`)}${this.ws()}}`;
    };
    for (let i = 0; i < tensors.length; i++)
      members.push(`${this.str(tensors[i]!.name)}${this.ws()}:${this.ws()}${entryFor(i)}`);
    if (tensors.length > 0 && r.chance(0.04)) {
      tags.push("duplicate-name");
      flags.duplicateNames = true;
      const i = r.int(0, tensors.length - 1);
      members.splice(r.int(0, members.length), 0, `${this.str(tensors[i]!.name)}:${entryFor(i)}`);
    }

    // Metadata.
    const metaKind = r.int(0, 99);
    const metadata = (): string | null => {
      if (metaKind < 45) return null;
      if (metaKind < 50) return "null";
      if (metaKind < 58) return "{}";
      if (metaKind < 95) {
        const pairs: string[] = [];
        const keys: string[] = [];
        for (let k = r.int(1, 4); k > 0; k--) {
          const key = r.chance(0.6) ? r.pick(["format", "a", "b", "", "__proto__", "k"]) : r.pick(NAMES);
          if (keys.includes(key)) flags.duplicateMetadataKeys = true;
          keys.push(key);
          pairs.push(
            `${this.str(key)}${this.ws()}:${this.ws()}${this.str(r.pick(["pt", "", "v", "\u{1F600}", 'q"', "1"]))}`,
          );
        }
        if (r.chance(0.04)) {
          flags.duplicateMetadataKeys = true;
          pairs.push(pairs[0]!);
        }
        if (flags.duplicateMetadataKeys) tags.push("duplicate-metadata-key");
        return `{${this.ws()}${pairs.join(`,${this.ws()}`)}${this.ws()}}`;
      }
      tags.push("metadata-invalid");
      return r.pick(['{"a":1}', '{"a":null}', '{"a":{"b":"c"}}', '["a"]', '"a"', "1", '{"a":["b"]}', '{"a":true}']);
    };
    const meta = metadata();
    if (meta !== null) {
      const member = `${this.str("__metadata__")}${this.ws()}:${this.ws()}${meta}`;
      members.splice(r.chance(0.7) ? 0 : r.int(0, members.length), 0, member);
      if (r.chance(0.03)) {
        tags.push("metadata-twice");
        members.splice(r.int(0, members.length), 0, `"__metadata__":${r.pick(["null", "{}", meta])}`);
      }
    }

    let text = `${this.ws()}{${this.ws()}${members.join(`${this.ws()},${this.ws()}`)}${this.ws()}}${this.ws()}`;
    if (r.chance(0.03)) {
      tags.push("top-level");
      text = r.pick([
        "[]",
        "null",
        '""',
        "1",
        `[${members.join(",")}]`,
        `{${members.join(",")},}`,
        `{${members.join(",")}`,
      ]);
    }
    if (r.chance(0.02)) {
      tags.push("trailing");
      text += r.pick(["x", "}", "{}", "\u0000", ",", "]"]);
    }
    if (r.chance(0.1)) text += " ".repeat(r.int(1, 7));
    return { text, flags, dataLength };
  }
}

function generate(rng: Rng): Generated {
  const tags: string[] = [];
  const gen = new Gen(rng, tags);
  const { text, flags, dataLength } = gen.header();
  let header: Uint8Array = new TextEncoder().encode(text);
  // Byte-level edits.
  if (rng.chance(0.02)) {
    tags.push("bom");
    header = concat(new Uint8Array([0xef, 0xbb, 0xbf]), header);
  }
  if (rng.chance(0.02)) {
    tags.push("nul");
    header = concat(header, new Uint8Array(rng.int(1, 3)));
  }
  if (rng.chance(0.04)) {
    // Raw UTF-8 edge sequence right after a quote (inside a string), or anywhere.
    tags.push("utf8-edge");
    const quotes = [...header.keys()].filter((i) => header[i] === 0x22);
    const at =
      quotes.length > 0 && rng.chance(0.8) ? quotes[rng.int(0, quotes.length - 1)]! + 1 : rng.int(0, header.length);
    header = concat(header.subarray(0, at), new Uint8Array(rng.pick(UTF8_EDGES)), header.subarray(at));
  }
  if (rng.chance(0.01)) {
    tags.push("truncated-text");
    header = header.slice(0, rng.int(0, header.length));
  }
  const edited = header.length !== new TextEncoder().encode(text).length || tags.some((t) => t === "utf8-edge");
  let n = BigInt(header.length);
  let exactN = true;
  const nEdit = rng.int(0, 99);
  if (nEdit < 3) {
    n += BigInt(rng.pick([-3, -2, -1, 1, 2, 3]));
    if (n < 0n) n = 0n;
    exactN = false;
    tags.push("n-edit");
  } else if (nEdit < 5) {
    n = rng.pick([100_000_001n, 2n ** 63n, 2n ** 64n - 1n, 100_000_000n, 2n ** 32n]);
    exactN = false;
    tags.push("n-huge");
  }
  const file = new Uint8Array(8 + header.length + dataLength);
  new DataView(file.buffer).setBigUint64(0, n, true);
  file.set(header, 8);
  if (rng.chance(0.003)) {
    tags.push("short-file");
    return { bytes: file.slice(0, rng.int(0, 7)), text: "", dataLength: 0, exactN: false, flags, tags };
  }
  return { bytes: file, text: edited ? "" : text, dataLength, exactN, flags, tags };
}

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((a, p) => a + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function fileFrom(text: string, dataLength: number): Uint8Array {
  const header = new TextEncoder().encode(text);
  const file = new Uint8Array(8 + header.length + dataLength);
  new DataView(file.buffer).setBigUint64(0, BigInt(header.length), true);
  file.set(header, 8);
  return file;
}

/** Hand-written cases first: the boundaries the random generator might reach only rarely. */
function seedCases(): Generated[] {
  const out: Generated[] = [];
  const none: Flags = { duplicateNames: false, duplicateMetadataKeys: false };
  const add = (text: string, dataLength = 0, tags: string[] = ["seed"]) =>
    out.push({ bytes: fileFrom(text, dataLength), text, dataLength, exactN: true, flags: none, tags });
  const entry = (extra = "", dtype = '"U8"') => `{"dtype":${dtype},"shape":[0],"data_offsets":[0,0]${extra}}`;
  for (const x of FLOAT_EDGES) add(`{"t":${entry(`,"x":${x}`)}}`);
  for (const depth of [125, 126, 127, 128, 129]) {
    add(`{"t":${entry(`,"x":${"[".repeat(depth - 2)}${"]".repeat(depth - 2)}`)}}`);
    add(`{"x":${"[".repeat(depth - 1)}${"]".repeat(depth - 1)}}`);
    add(`{"__metadata__":{"a":"b"},"t":${entry(`,"x":${'{"k":'.repeat(depth - 2)}0${"}".repeat(depth - 2)}`)}}`);
  }
  for (const dtype of [...DTYPES, ...BAD_DTYPES]) {
    add(`{"t":${entry("", `{"${dtype}":null}`)}}`);
    add(`{"t":["${dtype}",[0],[0,0]]}`);
  }
  for (const form of [
    '{"U8":[]}',
    '{"U8":{}}',
    '{"U8":0}',
    '{"U8":null,"I8":null}',
    "{}",
    '["U8"]',
    '{"\\u0055\\u0038":null}',
  ]) {
    add(`{"t":${entry("", form)}}`);
  }
  for (const ws of [...WS_OK, ...WS_BAD]) add(`${ws}{${ws}"t"${ws}:${ws}${entry()}${ws}}${ws}`);
  add('{"t":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":"\\ud800"}}');
  add('{"t":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"\\ud800":1}}');
  add('{"__metadata__":{"k":"\\udc00"}}');
  add('{"t":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":1,"x":2}}');
  add('{"t":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"dtype":"U8"}}');
  add('{"t":[{"U8":null},[0],[0,0]]}');
  add('{"t":["U8",[0],[0,0],null]}');
  add('{"t":["U8",[0]]}');
  add("[}");
  add('["a"');
  add("null x");
  add('{"__metadata__":{"a":"b"},"__metadata__":null}');
  add('{"__metadata__":1,"x":}');
  return out;
}

// ------------------------------------------------------------------------------------------------ verdicts

interface Ours {
  ok: boolean;
  code: string;
  message: string;
}

function ours(bytes: Uint8Array): Ours {
  try {
    deserialize(bytes);
    return { ok: true, code: "ok", message: "" };
  } catch (error) {
    if (isSafetensorError(error)) return { ok: false, code: error.code, message: error.message };
    return { ok: false, code: `CRASH ${(error as Error)?.name}`, message: String((error as Error)?.stack ?? error) };
  }
}

interface Theirs {
  ok: boolean;
  error: string | null;
  safe_open_mismatch?: { ok: boolean; error: string | null };
}

// ------------------------------------------------------------------------------------------------ reference process

class Reference {
  private child: ChildProcessWithoutNullStreams;
  private lines: AsyncIterableIterator<string>;
  private serial = 0;

  constructor(python: string) {
    this.child = spawn(python, [path.join(here, "diff_fuzz.py")], { stdio: ["pipe", "pipe", "pipe"] });
    this.child.stderr.on("data", (chunk) => process.stderr.write(chunk));
    this.lines = readline.createInterface({ input: this.child.stdout })[Symbol.asyncIterator]();
  }

  async ready(): Promise<string> {
    return (await this.lines.next()).value as string;
  }

  async judge(files: Uint8Array[]): Promise<Theirs[]> {
    const id = this.serial++;
    const batch = path.join(OUT, `batch-${String(id).padStart(4, "0")}.jsonl`);
    const results = path.join(OUT, `results-${String(id).padStart(4, "0")}.jsonl`);
    fs.writeFileSync(
      batch,
      files.map((b, i) => JSON.stringify({ id: i, b64: Buffer.from(b).toString("base64") })).join("\n"),
    );
    this.child.stdin.write(`${batch} ${results}\n`);
    const line = (await this.lines.next()).value as string;
    if (!line?.startsWith("done")) throw new Error(`reference process: unexpected answer ${line}`);
    const out = fs
      .readFileSync(results, "utf8")
      .split("\n")
      .filter((l) => l.trim() !== "")
      .map((l) => JSON.parse(l) as Theirs & { id: number });
    if (!KEEP_BATCHES) {
      fs.rmSync(batch);
      fs.rmSync(results);
    }
    return out;
  }

  close() {
    this.child.stdin.write("quit\n");
    this.child.stdin.end();
  }
}
const KEEP_BATCHES = process.argv.includes("--keep-batches");

// ------------------------------------------------------------------------------------------------ minimization

const TOKEN_RE = /"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|[{}[\]:,]|\s+|true|false|null|./gsu;

type Signature = string;

function signature(o: Ours, t: Theirs): Signature {
  return `ours ${o.ok ? "ok" : o.code} / reference ${t.ok ? "ok" : refClass(t.error)}`;
}

async function minimize(
  ref: Reference,
  g: Generated,
  target: Signature,
): Promise<{ text: string; dataLength: number }> {
  let tokens: string[] = [...(g.text.match(TOKEN_RE) ?? [])];
  let dataLength = g.dataLength;
  const same = async (candidates: { tokens: string[]; dataLength: number }[]) => {
    const files = candidates.map((c) => fileFrom(c.tokens.join(""), c.dataLength));
    const theirs = await ref.judge(files);
    return candidates.findIndex((_, i) => signature(ours(files[i]!), theirs[i]!) === target);
  };
  for (let chunk = Math.max(1, tokens.length >> 1); chunk >= 1; ) {
    const candidates: { tokens: string[]; dataLength: number }[] = [];
    for (let i = 0; i < tokens.length; i += chunk) {
      candidates.push({ tokens: [...tokens.slice(0, i), ...tokens.slice(i + chunk)], dataLength });
    }
    const found = candidates.length > 0 ? await same(candidates) : -1;
    if (found >= 0) tokens = candidates[found]!.tokens;
    else chunk >>= 1;
  }
  // Smaller data region (offsets may have shrunk with the header).
  for (const d of [0, 1, 2, 4, 8]) {
    if (d >= dataLength) break;
    if ((await same([{ tokens, dataLength: d }])) === 0) {
      dataLength = d;
      break;
    }
  }
  return { text: tokens.join(""), dataLength };
}

// ------------------------------------------------------------------------------------------------ main

interface Example {
  index: number;
  tags: string[];
  hex: string;
  text: string;
  ours: string;
  reference: string | null;
}

async function main() {
  const ref = referencePython();
  if (!ref) {
    console.error(referenceMissingReason());
    process.exit(2);
  }
  const reference = new Reference(ref.python);
  console.log(
    `${await reference.ready()} (${ref.python}); ${CASES} cases, seed ${SEED}, batches of ${BATCH}; work dir ${OUT}`,
  );
  const rng = new Rng(SEED);
  const seeds = seedCases();
  const started = performance.now();

  let total = 0;
  let bothOk = 0;
  let bothFail = 0;
  let intended = 0;
  let intendedPrecedence = 0;
  const mappingFirst = new Map<string, Generated>();
  const disagreements = new Map<Signature, { count: number; examples: Example[]; first: Generated }>();
  const crashes: Example[] = [];
  const safeOpenMismatches: Example[] = [];
  const mapping = new Map<string, Map<string, number>>();
  const mappingExamples = new Map<string, Example>();
  const tagCounts = new Map<string, number>();

  while (total < CASES) {
    const batch: Generated[] = [];
    while (batch.length < BATCH && total + batch.length < CASES) {
      const next = seeds.shift() ?? generate(rng);
      batch.push(next);
    }
    const our = batch.map((g) => ours(g.bytes));
    const theirs = await reference.judge(batch.map((g) => g.bytes));
    batch.forEach((g, i) => {
      const index = total + i;
      const o = our[i]!;
      const t = theirs[i]!;
      for (const tag of new Set(g.tags)) tagCounts.set(tag, (tagCounts.get(tag) ?? 0) + 1);
      const example = (): Example => ({
        index,
        tags: [...new Set(g.tags)],
        hex: Buffer.from(g.bytes.subarray(0, 600)).toString("hex"),
        text: g.text || Buffer.from(g.bytes.subarray(8, 608)).toString("latin1"),
        ours: o.ok ? "ok" : `${o.code}: ${o.message}`,
        reference: t.error,
      });
      if (o.code.startsWith("CRASH")) crashes.push(example());
      if (t.safe_open_mismatch) safeOpenMismatches.push(example());
      if (o.ok && t.ok) {
        bothOk++;
        return;
      }
      if (!o.ok && !t.ok) {
        bothFail++;
        const cls = refClass(t.error);
        // We stop at a duplicate name/key the reference does not see as an error: the intended difference, again.
        if (
          o.code === "DuplicateKey" &&
          /duplicate (tensor name|key)/.test(o.message) &&
          (g.flags.duplicateNames || g.flags.duplicateMetadataKeys) &&
          !cls.startsWith("json: duplicate field")
        ) {
          intendedPrecedence++;
          return;
        }
        const row = mapping.get(cls) ?? new Map<string, number>();
        row.set(o.code, (row.get(o.code) ?? 0) + 1);
        mapping.set(cls, row);
        const key = `${cls} -> ${o.code}`;
        if (!mappingExamples.has(key)) mappingExamples.set(key, example());
        if (!mappingFirst.has(key) && g.text && g.exactN) mappingFirst.set(key, g);
        return;
      }
      // Verdicts differ.
      const duplicateMessage = /duplicate (tensor name|key)/.test(o.message);
      if (
        !o.ok &&
        t.ok &&
        o.code === "DuplicateKey" &&
        duplicateMessage &&
        (g.flags.duplicateNames || g.flags.duplicateMetadataKeys)
      ) {
        intended++;
        return;
      }
      const sig = signature(o, t);
      const group = disagreements.get(sig) ?? { count: 0, examples: [], first: g };
      group.count++;
      if (group.examples.length < 3) group.examples.push(example());
      disagreements.set(sig, group);
    });
    total += batch.length;
    process.stderr.write(`\r${total}/${CASES} cases, ${disagreements.size} disagreement groups`);
  }
  process.stderr.write("\n");

  // Minimize one reproducer per group.
  const reproducers: Record<string, { text: string; dataLength: number; hex: string }> = {};
  if (MINIMIZE) {
    for (const [sig, group] of disagreements) {
      if (!group.first.text || !group.first.exactN) continue;
      const min = await minimize(reference, group.first, sig);
      reproducers[sig] = { ...min, hex: Buffer.from(fileFrom(min.text, min.dataLength)).toString("hex") };
    }
  }

  // Mapping consistency (both fail, but our code is not the one the reference's error class maps to).
  const inconsistent: {
    mapping: string;
    count: number;
    example: Example;
    reproducer?: { text: string; dataLength: number; ours: string; reference: string | null };
  }[] = [];
  for (const [cls, row] of mapping) {
    const expected = expectedCodes(cls);
    for (const [code, count] of row) {
      if (!expected?.includes(code)) {
        const key = `${cls} -> ${code}`;
        const entry: (typeof inconsistent)[number] = { mapping: key, count, example: mappingExamples.get(key)! };
        const first = mappingFirst.get(key);
        if (MINIMIZE && first) {
          const target = signature(ours(first.bytes), { ok: false, error: entry.example.reference });
          const min = await minimize(reference, first, target);
          const file = fileFrom(min.text, min.dataLength);
          const [theirs] = await reference.judge([file]);
          const o = ours(file);
          entry.reproducer = { ...min, ours: `${o.code}: ${o.message}`, reference: theirs!.error };
        }
        inconsistent.push(entry);
      }
    }
  }
  reference.close();

  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  console.log(
    `\n${total} cases in ${seconds} s: both ok ${bothOk}, both fail ${bothFail}; intended differences (duplicates): ` +
      `${intended} verdicts, ${intendedPrecedence} where both fail but we stop at the duplicate first`,
  );
  console.log(`\nGenerator coverage (cases per feature): ${JSON.stringify(Object.fromEntries([...tagCounts].sort()))}`);
  console.log("\nReference error class -> our code (count):");
  for (const [cls, row] of [...mapping].sort((a, b) => a[0].localeCompare(b[0]))) {
    const flag = [...row.keys()].every((code) => expectedCodes(cls)?.includes(code)) ? "  " : "!!";
    console.log(`${flag} ${cls}  ->  ${[...row].map(([c, n]) => `${c} ${n}`).join(", ")}`);
  }
  if (inconsistent.length > 0) {
    console.log("\nMapping inconsistencies (both fail, codes differ from the expected mapping):");
    for (const i of inconsistent) {
      console.log(
        `  ${i.mapping} (${i.count}), e.g. case ${i.example.index}: ${JSON.stringify(i.example.text.slice(0, 200))}`,
      );
      console.log(`     ours: ${i.example.ours.slice(0, 200)}\n     reference: ${i.example.reference}`);
      if (i.reproducer) {
        console.log(
          `     minimal header: ${JSON.stringify(i.reproducer.text)} (+${i.reproducer.dataLength} data bytes)`,
        );
        console.log(`       ours: ${i.reproducer.ours.slice(0, 200)}\n       reference: ${i.reproducer.reference}`);
      }
    }
  }
  if (crashes.length > 0) {
    console.log(`\n${crashes.length} inputs made our parser throw something other than a SafetensorError:`);
    for (const c of crashes.slice(0, 5)) console.log(`  case ${c.index}: ${c.ours.slice(0, 300)}\n    hex ${c.hex}`);
  }
  if (safeOpenMismatches.length > 0) {
    console.log(`\n${safeOpenMismatches.length} cases where the reference's safe_open and deserialize disagree:`);
    for (const c of safeOpenMismatches.slice(0, 5)) console.log(`  case ${c.index}: hex ${c.hex}`);
  }
  if (disagreements.size === 0) console.log("\nNo verdict disagreements beyond the intended ones.");
  else {
    console.log(`\nVerdict disagreements (${disagreements.size} groups):`);
    for (const [sig, group] of disagreements) {
      console.log(`\n## ${sig}: ${group.count} cases`);
      const repro = reproducers[sig];
      if (repro) {
        console.log(
          `   minimal header: ${JSON.stringify(repro.text)}  (N = its byte length, then ${repro.dataLength} data bytes)`,
        );
        console.log(`   file hex: ${repro.hex}`);
      }
      for (const e of group.examples) {
        console.log(`   e.g. case ${e.index} [${e.tags.join(",")}]: ${JSON.stringify(e.text.slice(0, 300))}`);
        console.log(`      ours: ${e.ours.slice(0, 200)}\n      reference: ${e.reference}`);
      }
    }
  }
  const report = {
    cases: total,
    seed: SEED,
    bothOk,
    bothFail,
    intended,
    intendedPrecedence,
    mapping: Object.fromEntries([...mapping].map(([k, v]) => [k, Object.fromEntries(v)])),
    inconsistent,
    disagreements: Object.fromEntries(
      [...disagreements].map(([k, v]) => [k, { count: v.count, examples: v.examples, reproducer: reproducers[k] }]),
    ),
    crashes,
    safeOpenMismatches,
  };
  fs.writeFileSync(path.join(OUT, "report.json"), JSON.stringify(report, null, 1));
  console.log(`\nFull report: ${path.join(OUT, "report.json")}`);
  process.exitCode = disagreements.size > 0 || crashes.length > 0 ? 1 : 0;
}

await main();
