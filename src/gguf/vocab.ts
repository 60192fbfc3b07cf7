/**
 * The tokenizer part of a GGUF (`tokenizer.ggml.*`, `tokenizer.chat_template`), as llama.cpp's converter writes it
 * for a byte-level BPE `tokenizer.json` ("gpt2" with its pre-tokenizer name) or a SentencePiece `tokenizer.model`
 * ("llama"). Pure: parsed files in, metadata out.
 */
import { SafetensorError } from "../format/errors.js";
import { bpeEncoder, idsHash, readBpeTokenizer } from "./bpe.js";
import type { KvBuilder } from "./kv.js";
import { PRE_CHECK_TEXT, PRE_TOKENIZER_BY_HASH, PRE_TOKENIZER_NAMES } from "./pre-tokenizers.js";
import { PIECE_TYPES, parseSentencePiece } from "./sentencepiece.js";
import { ADD_TOKEN_KEYS, type Json, type ModelTextFiles, readSpecialVocab, SPECIAL_ID_KEYS } from "./special-vocab.js";

/** llama.cpp's token types. */
export const TOKEN_TYPES = { NORMAL: 1, UNKNOWN: 2, CONTROL: 3, USER_DEFINED: 4, UNUSED: 5, BYTE: 6 } as const;

export interface TokenizerFiles extends ModelTextFiles {
  /** tokenizer.model bytes, when the model has one. */
  sentencePiece?: Uint8Array | undefined;
  addedTokensJson?: Json | undefined;
}

export interface VocabOptions {
  /** The pre-tokenizer name to write when llama.cpp's table does not know the tokenizer's hash. */
  tokenizerPre?: string | undefined;
}

/** The converter's list of added-token texts that look special though not marked so. */
export function looksSpecial(token: string): boolean {
  if (token === "<pad>" || token === "<mask>" || token === "<2mass>" || token === "[@BOS@]") return true;
  if (token.startsWith("<|") && token.endsWith("|>")) return true;
  if (token.startsWith("<｜") && token.endsWith("｜>")) return true;
  return token.startsWith("<unused") && token.endsWith(">");
}

function refuse(message: string): SafetensorError {
  return new SafetensorError("UnsupportedModel", message);
}

/** What a BPE tokenizer's pre-tokenizer is called in llama.cpp, by hash (or the override). */
export async function detectPreTokenizer(
  json: Json,
  override?: string,
): Promise<{ name: string; hash: string | null }> {
  const tok = readBpeTokenizer(json);
  let hash: string | null = null;
  try {
    hash = await idsHash(bpeEncoder(tok)(PRE_CHECK_TEXT));
  } catch (error) {
    if (override === undefined) throw error;
  }
  const known = hash === null ? undefined : PRE_TOKENIZER_BY_HASH.get(hash);
  if (known !== undefined) return { name: known, hash };
  if (override !== undefined) {
    if (!PRE_TOKENIZER_NAMES.has(override)) {
      throw new SafetensorError(
        "InvalidOption",
        `--tokenizer-pre ${JSON.stringify(override)} is not a name llama.cpp knows`,
      );
    }
    return { name: override, hash };
  }
  throw refuse(
    `BPE pre-tokenizer not recognised (hash ${hash}): llama.cpp's converter refuses this tokenizer too; name the ` +
      "pre-tokenizer llama.cpp should use with --tokenizer-pre (e.g. llama-bpe, qwen2, gpt-2)",
  );
}

/** `tokenizer.ggml.model` "gpt2": tokens, types, pre-tokenizer, merges, special ids and the chat template. */
export async function writeBpeVocab(
  kv: KvBuilder,
  files: TokenizerFiles,
  vocabSize: number | undefined,
  options: VocabOptions = {},
): Promise<void> {
  const json = files.tokenizerJson;
  if (json === undefined) throw refuse("the model has no tokenizer.json (nor a tokenizer.model)");
  const tok = readBpeTokenizer(json);
  let maxId = -1;
  for (const id of tok.vocab.values()) if (id > maxId) maxId = id;
  const size = vocabSize ?? tok.vocab.size;
  if (maxId >= size) throw refuse(`tokenizer ids reach ${maxId}, past config.json's vocab_size ${size}`);
  const { name: pre } = await detectPreTokenizer(json, options.tokenizerPre);
  const reverse = new Map<number, string>();
  for (const [token, id] of tok.vocab) reverse.set(id, token);
  const added = new Map(tok.added.map((t) => [t.content, t]));
  const addedById = new Map(tok.added.map((t) => [t.id, t]));
  const tokens = new Array<string>(size);
  const types = new Int32Array(size);
  for (let i = 0; i < size; i++) {
    let token = reverse.get(i);
    if (token === undefined) {
      tokens[i] = `[PAD${i}]`;
      types[i] = TOKEN_TYPES.UNUSED;
      continue;
    }
    if (added.has(token)) {
      const info = addedById.get(i) ?? added.get(token)!;
      if (info.special || looksSpecial(token)) types[i] = TOKEN_TYPES.CONTROL;
      else {
        token = token.replaceAll("\u2581", " ");
        types[i] = TOKEN_TYPES.USER_DEFINED;
      }
    } else types[i] = TOKEN_TYPES.NORMAL;
    tokens[i] = token;
  }
  kv.str("tokenizer.ggml.model", "gpt2");
  kv.str("tokenizer.ggml.pre", pre);
  kv.strings("tokenizer.ggml.tokens", tokens);
  kv.i32s("tokenizer.ggml.token_type", types);
  writeSpecial(kv, files, { loadMerges: true, merges: tok.merges });
}

/** `tokenizer.ggml.model` "llama": SentencePiece pieces with scores and types, as the converter reads them. */
export function writeSentencePieceVocab(kv: KvBuilder, files: TokenizerFiles, vocabSize: number | undefined): number {
  const model = parseSentencePiece(files.sentencePiece!);
  const size = vocabSize ?? model.pieces.length;
  const tokens = Array.from({ length: size }, (_, i) => `[PAD${i}]`);
  const scores = new Float32Array(size).fill(-10000);
  const types = new Int32Array(size).fill(TOKEN_TYPES.UNUSED);
  model.pieces.forEach((p, id) => {
    if (id >= size) return;
    tokens[id] = p.piece;
    scores[id] = p.score;
    types[id] =
      p.type === PIECE_TYPES.UNKNOWN
        ? TOKEN_TYPES.UNKNOWN
        : p.type === PIECE_TYPES.CONTROL
          ? TOKEN_TYPES.CONTROL
          : p.type === PIECE_TYPES.UNUSED
            ? TOKEN_TYPES.UNUSED
            : p.type === PIECE_TYPES.BYTE
              ? TOKEN_TYPES.BYTE
              : TOKEN_TYPES.NORMAL;
  });
  if (files.addedTokensJson !== undefined) {
    for (const [text, id] of Object.entries(files.addedTokensJson)) {
      if (typeof id !== "number" || id >= size) continue;
      tokens[id] = text;
      scores[id] = -1000;
      types[id] = TOKEN_TYPES.USER_DEFINED;
    }
  }
  const decoder = (files.tokenizerConfig?.added_tokens_decoder ?? {}) as Record<string, Json>;
  for (const [key, data] of Object.entries(decoder)) {
    const id = Number.parseInt(key, 10);
    if (!(id >= 0 && id < size)) continue;
    let token = String(data.content);
    if (data.special === true || looksSpecial(token)) types[id] = TOKEN_TYPES.CONTROL;
    else {
      token = token.replaceAll("\u2581", " ");
      types[id] = TOKEN_TYPES.USER_DEFINED;
    }
    scores[id] = -1000;
    tokens[id] = token;
  }
  kv.str("tokenizer.ggml.model", "llama");
  kv.str("tokenizer.ggml.pre", "default");
  kv.strings("tokenizer.ggml.tokens", tokens);
  kv.f32s("tokenizer.ggml.scores", scores);
  kv.i32s("tokenizer.ggml.token_type", types);
  writeSpecial(kv, files, { nVocab: size });
  return size;
}

function writeSpecial(
  kv: KvBuilder,
  files: TokenizerFiles,
  options: { loadMerges?: boolean; merges?: readonly string[]; nVocab?: number },
): void {
  const special = readSpecialVocab(files, options);
  if (special.merges.length > 0) kv.strings("tokenizer.ggml.merges", special.merges);
  for (const [typ, id] of special.ids) {
    const key = SPECIAL_ID_KEYS[typ];
    if (key !== undefined) kv.u32(key, id);
  }
  for (const [typ, value] of special.add) {
    const key = ADD_TOKEN_KEYS[typ];
    if (key !== undefined) kv.bool(key, value);
  }
  const template = special.chatTemplate;
  if (typeof template === "string") kv.str("tokenizer.chat_template", template);
  else if (Array.isArray(template)) {
    // gguf-py: named templates first, then their names, then the default one.
    const names: string[] = [];
    let fallback: string | undefined;
    for (const { name: raw, template: text } of template) {
      const name = (raw ?? "").replace(/[^A-Za-z0-9]/g, "_");
      if (name === "" || typeof text !== "string") continue;
      if (name === "default") fallback = text;
      else {
        if (!names.includes(name)) names.push(name);
        kv.str(`tokenizer.chat_template.${name}`, text);
      }
    }
    if (names.length > 0) kv.strings("tokenizer.chat_templates", names);
    if (fallback !== undefined) kv.str("tokenizer.chat_template", fallback);
  }
  if (special.normalizerLowercase !== undefined)
    kv.bool("tokenizer.ggml.normalizer.lowercase", special.normalizerLowercase);
  if (special.normalizerStripAccents !== undefined) {
    kv.bool("tokenizer.ggml.normalizer.strip_accents", special.normalizerStripAccents);
  }
}
