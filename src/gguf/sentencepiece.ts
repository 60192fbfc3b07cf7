/**
 * SentencePiece `tokenizer.model` files: the protobuf `ModelProto`, read by hand (field 1, the pieces: text,
 * score, type; field 2, the trainer spec's model type). Only what a GGUF vocabulary needs; unknown fields are
 * skipped by wire type, as protobuf readers do. Pure.
 */
import { SafetensorError } from "../format/errors.js";

/** sentencepiece_model.proto's piece types. */
export const PIECE_TYPES = { NORMAL: 1, UNKNOWN: 2, CONTROL: 3, USER_DEFINED: 4, UNUSED: 5, BYTE: 6 } as const;

export interface SentencePiece {
  readonly piece: string;
  readonly score: number;
  readonly type: number;
}

export interface SentencePieceModel {
  readonly pieces: readonly SentencePiece[];
  /** TrainerSpec.model_type: 1 unigram, 2 BPE, 3 word, 4 char. */
  readonly modelType: number;
}

function bad(message: string): SafetensorError {
  return new SafetensorError("UnsupportedModel", `tokenizer.model: ${message}`);
}

class Reader {
  pos = 0;
  constructor(
    readonly bytes: Uint8Array,
    readonly end = bytes.length,
  ) {}
  varint(): number {
    let result = 0;
    let scale = 1;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= this.end) throw bad("truncated varint");
      const b = this.bytes[this.pos++]!;
      result += (b & 0x7f) * scale;
      if ((b & 0x80) === 0) {
        if (!Number.isSafeInteger(result)) throw bad("varint too large");
        return result;
      }
      scale *= 128;
    }
    throw bad("varint too long");
  }
  skip(wire: number): void {
    if (wire === 0) this.varint();
    else if (wire === 1) this.pos += 8;
    else if (wire === 2) {
      const n = this.varint(); // read before pos: `this.pos += this.varint()` would add to the old pos
      this.pos += n;
    } else if (wire === 5) this.pos += 4;
    else throw bad(`wire type ${wire}`);
    if (this.pos > this.end) throw bad("truncated field");
  }
  sub(): Reader {
    const n = this.varint();
    if (this.pos + n > this.end) throw bad("truncated message");
    const r = new Reader(this.bytes, this.pos + n);
    r.pos = this.pos;
    this.pos += n;
    return r;
  }
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

function readPiece(r: Reader): SentencePiece {
  let piece = "";
  let score = 0;
  let type: number = PIECE_TYPES.NORMAL;
  const view = new DataView(r.bytes.buffer, r.bytes.byteOffset, r.bytes.byteLength);
  while (r.pos < r.end) {
    const tag = r.varint();
    const field = Math.floor(tag / 8);
    const wire = tag & 7;
    if (field === 1 && wire === 2) {
      const s = r.sub();
      try {
        piece = utf8.decode(r.bytes.subarray(s.pos, s.end));
      } catch {
        throw bad("a piece is not valid UTF-8");
      }
    } else if (field === 2 && wire === 5) {
      if (r.pos + 4 > r.end) throw bad("truncated score");
      score = view.getFloat32(r.pos, true);
      r.pos += 4;
    } else if (field === 3 && wire === 0) type = r.varint();
    else r.skip(wire);
  }
  return { piece, score, type };
}

/** Parse a tokenizer.model. `maxPieces` bounds the vocabulary (default 4 Mi). */
export function parseSentencePiece(bytes: Uint8Array, maxPieces = 1 << 22): SentencePieceModel {
  const r = new Reader(bytes);
  const pieces: SentencePiece[] = [];
  let modelType = 1;
  while (r.pos < r.end) {
    const tag = r.varint();
    const field = Math.floor(tag / 8);
    const wire = tag & 7;
    if (field === 1 && wire === 2) {
      if (pieces.length >= maxPieces) throw bad(`more than ${maxPieces} pieces`);
      pieces.push(readPiece(r.sub()));
    } else if (field === 2 && wire === 2) {
      const spec = r.sub();
      while (spec.pos < spec.end) {
        const t = spec.varint();
        if (t === 24) modelType = spec.varint();
        else spec.skip(t & 7);
      }
    } else r.skip(wire);
  }
  if (pieces.length === 0) throw bad("no pieces (is it a SentencePiece model?)");
  return { pieces, modelType };
}
