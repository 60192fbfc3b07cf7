/**
 * Byte-level BPE tokenizers from a `tokenizer.json` (the Hugging Face tokenizers format): enough of its pipeline
 * (added tokens, normalizers, pre-tokenizers, the BPE model, post-processors) to encode llama.cpp's check text
 * exactly as the tokenizers library does, so that the pre-tokenizer is identified the way llama.cpp's converter
 * identifies it (`tokenizer.ggml.pre`, by the SHA-256 of the ids). A tokenizer using a piece this encoder does not
 * implement is refused by name (`UnsupportedModel`), never guessed.
 *
 * Pure: JSON in, ids out.
 */
import { SafetensorError } from "../format/errors.js";

type Json = Record<string, unknown>;

function unsupported(what: string): SafetensorError {
  return new SafetensorError("UnsupportedModel", `tokenizer.json: ${what} is not supported`);
}

/** GPT-2's byte -> printable character table (bytes_to_unicode). */
export function byteToUnicode(): string[] {
  const table = new Array<string>(256);
  let n = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    table[b] = String.fromCodePoint(printable ? b : 256 + n++);
  }
  return table;
}

// Oniguruma's \s (the White_Space property), which JavaScript's \s is not: JS adds U+FEFF and lacks U+0085.
const SPACE_CLASS = "\\t\\n\\v\\f\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";

/**
 * A tokenizers (Oniguruma) pattern as a JavaScript regular expression: `\s` and `\S` spelled out, `(?i:...)`
 * groups expanded letter by letter (JavaScript engines before 2024 lack modifier groups). Constructs JavaScript
 * reads differently (possessive quantifiers, atomic groups, inline flags other than `(?i:`) are refused.
 */
export function translatePattern(pattern: string): RegExp {
  let out = "";
  let inClass = false;
  let caseless = 0;
  const groupStack: boolean[] = [];
  for (let i = 0; i < pattern.length; i++) {
    const ch = pattern[i]!;
    if (ch === "\\") {
      const next = pattern[i + 1];
      if (next === undefined) throw unsupported(`pattern ${JSON.stringify(pattern)}`);
      if (next === "s") out += inClass ? SPACE_CLASS : `[${SPACE_CLASS}]`;
      else if (next === "S") {
        if (inClass) throw unsupported(`\\S inside a class in pattern ${JSON.stringify(pattern)}`);
        out += `[^${SPACE_CLASS}]`;
      } else if (next === "p" || next === "P") {
        const end = pattern.indexOf("}", i);
        out += pattern.slice(i, end + 1);
        i = end;
        continue;
      } else out += ch + next;
      i++;
      continue;
    }
    if (inClass) {
      if (ch === "]") inClass = false;
      out += ch;
      continue;
    }
    if (ch === "[") {
      inClass = true;
      out += ch;
      continue;
    }
    if (ch === "(") {
      if (pattern.startsWith("(?i:", i)) {
        groupStack.push(true);
        caseless++;
        out += "(?:";
        i += 3;
        continue;
      }
      if (pattern.startsWith("(?>", i) || /^\(\?[a-zA-Z-]+[:)]/.test(pattern.slice(i))) {
        throw unsupported(`pattern ${JSON.stringify(pattern)}`);
      }
      groupStack.push(false);
      out += ch;
      continue;
    }
    if (ch === ")") {
      if (groupStack.pop()) caseless--;
      out += ch;
      continue;
    }
    if ((ch === "+" || ch === "*" || ch === "?" || ch === "}") && pattern[i + 1] === "+") {
      throw unsupported(`possessive quantifier in pattern ${JSON.stringify(pattern)}`);
    }
    if (caseless > 0 && ch.toLowerCase() !== ch.toUpperCase()) out += `[${ch.toLowerCase()}${ch.toUpperCase()}]`;
    else out += ch;
  }
  return new RegExp(out, "gu");
}

const GPT2_PATTERN = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

type Behavior = "Isolated" | "Removed" | "MergedWithPrevious" | "MergedWithNext" | "Contiguous";

/** Split `text` by the matches of `re`, as tokenizers' `Split` does for each behaviour. */
function splitBy(text: string, re: RegExp, behavior: Behavior, invert: boolean): string[] {
  const spans: [string, boolean][] = []; // [piece, isMatch]
  let last = 0;
  re.lastIndex = 0;
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    if (m[0].length === 0) {
      re.lastIndex++;
      continue;
    }
    if (m.index > last) spans.push([text.slice(last, m.index), false]);
    spans.push([m[0], true]);
    last = m.index + m[0].length;
  }
  if (last < text.length) spans.push([text.slice(last), false]);
  if (invert) for (const s of spans) s[1] = !s[1];
  const out: string[] = [];
  switch (behavior) {
    case "Isolated":
      return spans.map(([s]) => s);
    case "Removed":
      return spans.filter(([, m]) => !m).map(([s]) => s);
    case "MergedWithPrevious":
      for (const [s, m] of spans) {
        if (m && out.length > 0) out[out.length - 1] += s;
        else out.push(s);
      }
      return out;
    case "MergedWithNext": {
      let carry = "";
      for (const [s, m] of spans) {
        if (m) carry += s;
        else {
          out.push(carry + s);
          carry = "";
        }
      }
      if (carry !== "") out.push(carry);
      return out;
    }
    case "Contiguous": {
      let prev: boolean | null = null;
      for (const [s, m] of spans) {
        if (prev === m && m) out[out.length - 1] += s;
        else out.push(s);
        prev = m;
      }
      return out;
    }
  }
}

type PreStep = (pieces: string[]) => string[];

const BYTES = byteToUnicode();
const utf8 = new TextEncoder();

function byteLevelMap(piece: string): string {
  let out = "";
  for (const b of utf8.encode(piece)) out += BYTES[b];
  return out;
}

function preTokenizer(spec: Json | null | undefined): { steps: PreStep[]; byteLevel: boolean } {
  const steps: PreStep[] = [];
  let byteLevel = false;
  const add = (p: Json) => {
    switch (p.type) {
      case "Sequence":
        for (const inner of (p.pretokenizers as Json[]) ?? []) add(inner);
        return;
      case "Split": {
        const pattern = p.pattern as { Regex?: string; String?: string };
        const re =
          pattern.Regex !== undefined
            ? translatePattern(pattern.Regex)
            : new RegExp(String(pattern.String).replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), "gu");
        const behavior = p.behavior as Behavior;
        const invert = p.invert === true;
        steps.push((pieces) => pieces.flatMap((s) => splitBy(s, re, behavior, invert)));
        return;
      }
      case "Digits": {
        const re = p.individual_digits === true ? /\p{N}/gu : /\p{N}+/gu;
        steps.push((pieces) => pieces.flatMap((s) => splitBy(s, re, "Isolated", false)));
        return;
      }
      case "ByteLevel": {
        byteLevel = true;
        const prefix = p.add_prefix_space === true;
        const useRegex = p.use_regex !== false;
        const re = translatePattern(GPT2_PATTERN);
        steps.push((pieces) => {
          let out = pieces;
          if (prefix) out = out.map((s, i) => (i === 0 && !s.startsWith(" ") ? ` ${s}` : s));
          if (useRegex) out = out.flatMap((s) => splitBy(s, re, "Isolated", false));
          return out.map(byteLevelMap);
        });
        return;
      }
      default:
        throw unsupported(`pre-tokenizer ${String(p.type)}`);
    }
  };
  if (spec) add(spec);
  return { steps, byteLevel };
}

function normalizer(spec: Json | null | undefined): (s: string) => string {
  if (!spec) return (s) => s;
  switch (spec.type) {
    case "NFC":
    case "NFD":
    case "NFKC":
    case "NFKD": {
      const form = spec.type;
      return (s) => s.normalize(form);
    }
    case "Lowercase":
      return (s) => s.toLowerCase();
    case "Sequence": {
      const all = ((spec.normalizers as Json[]) ?? []).map(normalizer);
      return (s) => all.reduce((acc, f) => f(acc), s);
    }
    default:
      throw unsupported(`normalizer ${String(spec.type)}`);
  }
}

export interface AddedToken {
  readonly id: number;
  readonly content: string;
  readonly special: boolean;
  readonly normalized: boolean;
}

/** What the converter needs from a tokenizer.json: the vocabulary, added tokens and merges. */
export interface BpeTokenizer {
  readonly vocab: ReadonlyMap<string, number>;
  readonly added: readonly AddedToken[];
  /** Merges as llama.cpp stores them: "a b", spaces inside a part written as U+0120. */
  readonly merges: readonly string[];
  readonly json: Json;
}

export function readBpeTokenizer(json: Json): BpeTokenizer {
  const model = json.model as Json | undefined;
  if (model?.type !== "BPE") throw unsupported(`model type ${String(model?.type)} (a BPE model is needed)`);
  const vocabJson = model.vocab as Record<string, number>;
  const vocab = new Map<string, number>();
  for (const [token, id] of Object.entries(vocabJson)) vocab.set(token, id);
  const added: AddedToken[] = ((json.added_tokens as Json[]) ?? []).map((t) => ({
    id: t.id as number,
    content: t.content as string,
    special: t.special === true,
    normalized: t.normalized === true,
  }));
  for (const t of added) vocab.set(t.content, t.id);
  const rawMerges = (model.merges as unknown[]) ?? [];
  const merges = rawMerges.map((m) => {
    if (typeof m === "string") return m;
    if (Array.isArray(m) && m.length === 2) {
      return m.map((part: string) => part.replaceAll(" ", "\u0120")).join(" ");
    }
    throw unsupported("this merges format");
  });
  return { vocab, added, merges, json };
}

/**
 * An encoder for the tokenizer: `encode(text)` returns the ids the tokenizers library gives with special tokens
 * added (`tokenizer.encode(text)`).
 */
export function bpeEncoder(tok: BpeTokenizer): (text: string) => number[] {
  const json = tok.json;
  const model = json.model as Json;
  if (model.dropout !== null && model.dropout !== undefined) throw unsupported("BPE dropout");
  if (model.continuing_subword_prefix || model.end_of_word_suffix) throw unsupported("subword prefixes/suffixes");
  const ignoreMerges = model.ignore_merges === true;
  const ranks = new Map<string, number>();
  ((model.merges as unknown[]) ?? []).forEach((m, i) => {
    let key: string;
    if (typeof m === "string") {
      const space = m.indexOf(" ");
      key = `${m.slice(0, space)}\u0000${m.slice(space + 1)}`;
    } else {
      const [a, b] = m as [string, string];
      key = `${a}\u0000${b}`;
    }
    if (!ranks.has(key)) ranks.set(key, i);
  });
  const normalize = normalizer(json.normalizer as Json | null);
  const pre = preTokenizer(json.pre_tokenizer as Json | null);
  if (!pre.byteLevel) throw unsupported("a BPE tokenizer without a ByteLevel pre-tokenizer");
  const unkToken = model.unk_token as string | null;
  const vocab = tok.vocab;
  const cache = new Map<string, number[]>();

  const bpe = (word: string): number[] => {
    const cached = cache.get(word);
    if (cached) return cached;
    let result: number[];
    const whole = vocab.get(word);
    if (ignoreMerges && whole !== undefined) result = [whole];
    else {
      let parts = [...word];
      for (;;) {
        let best = -1;
        let bestRank = Infinity;
        for (let i = 0; i + 1 < parts.length; i++) {
          const r = ranks.get(`${parts[i]}\u0000${parts[i + 1]}`);
          if (r !== undefined && r < bestRank) {
            bestRank = r;
            best = i;
          }
        }
        if (best < 0) break;
        const a = parts[best]!;
        const b = parts[best + 1]!;
        const next: string[] = [];
        for (let i = 0; i < parts.length; i++) {
          if (i + 1 < parts.length && parts[i] === a && parts[i + 1] === b) {
            next.push(a + b);
            i++;
          } else next.push(parts[i]!);
        }
        parts = next;
      }
      result = [];
      for (const p of parts) {
        const id = vocab.get(p);
        if (id !== undefined) result.push(id);
        else if (unkToken !== null && unkToken !== undefined && vocab.has(unkToken)) result.push(vocab.get(unkToken)!);
      }
    }
    cache.set(word, result);
    return result;
  };

  const added = [...tok.added].sort((a, b) => b.content.length - a.content.length);
  const splitAdded = (text: string): (string | number)[] => {
    if (added.length === 0) return [text];
    const out: (string | number)[] = [];
    let start = 0;
    let i = 0;
    while (i < text.length) {
      const hit = added.find((t) => t.content.length > 0 && text.startsWith(t.content, i));
      if (hit) {
        if (i > start) out.push(text.slice(start, i));
        out.push(hit.id);
        i += hit.content.length;
        start = i;
      } else i++;
    }
    if (start < text.length) out.push(text.slice(start));
    return out;
  };

  const post = postProcessor(json.post_processor as Json | null, vocab);
  return (text: string) => {
    const ids: number[] = [];
    for (const part of splitAdded(text)) {
      if (typeof part === "number") {
        ids.push(part);
        continue;
      }
      let pieces = [normalize(part)];
      for (const step of pre.steps) pieces = step(pieces);
      for (const piece of pieces) if (piece.length > 0) ids.push(...bpe(piece));
    }
    return post(ids);
  };
}

function postProcessor(spec: Json | null, vocab: ReadonlyMap<string, number>): (ids: number[]) => number[] {
  if (!spec) return (ids) => ids;
  switch (spec.type) {
    case "ByteLevel":
      return (ids) => ids;
    case "Sequence": {
      const all = ((spec.processors as Json[]) ?? []).map((p) => postProcessor(p, vocab));
      return (ids) => all.reduce((acc, f) => f(acc), ids);
    }
    case "TemplateProcessing": {
      const specials = (spec.special_tokens as Record<string, { ids: number[] }>) ?? {};
      const single = (spec.single as Json[]) ?? [];
      return (ids) => {
        const out: number[] = [];
        for (const item of single) {
          if ("Sequence" in item) out.push(...ids);
          else {
            const id = (item.SpecialToken as { id: string }).id;
            const entry = specials[id];
            if (entry === undefined) throw unsupported(`post-processor special token ${JSON.stringify(id)}`);
            out.push(...entry.ids);
          }
        }
        return out;
      };
    }
    default:
      throw unsupported(`post-processor ${String(spec.type)}`);
  }
}

/** Python's str() of a list of ints, hashed: llama.cpp's `chkhsh`. */
export async function idsHash(ids: readonly number[]): Promise<string> {
  const text = `[${ids.join(", ")}]`;
  const digest = await crypto.subtle.digest("SHA-256", utf8.encode(text));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}
