/**
 * A symbolic pickle machine: it reads protocols 0–5 and builds inert values (values.ts). It never imports, calls or
 * looks up anything: GLOBAL pushes a name, REDUCE records a call. Every global met is recorded with where it was used,
 * so a scanner can report what a hostile file tried to do; the caller decides by the verdicts (globals.ts).
 *
 * Limits are named options with defaults far above what real checkpoints need (a 10k-tensor state dict uses ~150k
 * objects and a stack of a few dozen) and far below what would exhaust memory.
 */
import { SafetensorError } from "../format/errors.js";
import { canonicalGlobal, classifyGlobal, type Verdict } from "./globals.js";
import { DEFAULT_PICKLE_LIMITS, type PickleLimits } from "./limits.js";
import {
  latin1Bytes,
  PyBytes,
  PyCall,
  PyComplex,
  PyDict,
  PyFloat,
  PyGlobal,
  PyList,
  PyPersistent,
  PySet,
  PyTuple,
  type PyValue,
} from "./values.js";

export { DEFAULT_PICKLE_LIMITS, type PickleLimits };

/** How a pickle uses a global it names. */
export type GlobalUse = "reference" | "call" | "instantiate" | "build" | "persistent-id" | "extension";

/** One global the pickle named, with every place it was used. */
export interface GlobalRecord {
  /** As written in the pickle. */
  readonly module: string;
  readonly name: string;
  /** What Python 3 would import (Python 2 names mapped as `_compat_pickle` does). */
  readonly resolved: string;
  readonly verdict: Verdict;
  /** Byte offsets (in this pickle) of the GLOBAL / STACK_GLOBAL / INST opcodes that named it. */
  readonly offsets: number[];
  readonly uses: Set<GlobalUse>;
}

export interface PickleResult {
  readonly value: PyValue;
  /** Byte length of the pickle, STOP included (a stream may hold more after it). */
  readonly length: number;
  readonly protocol: number;
  /** Every global named, in order of first appearance, keyed by `module.name` as written. */
  readonly globals: Map<string, GlobalRecord>;
  readonly persistentIds: PyPersistent[];
}

function fail(message: string, offset: number): never {
  throw new SafetensorError("InvalidPickle", `pickle: ${message} (at byte ${offset})`);
}

function limit(what: string, max: number, offset: number): never {
  throw new SafetensorError(
    "PickleLimit",
    `pickle: more than ${max} ${what} (at byte ${offset}); raise the limit if the file is trusted to be this large`,
  );
}

const MARK = Symbol("mark");
type Slot = PyValue | typeof MARK;

const utf8 = new TextDecoder("utf-8", { fatal: true });
const latin1 = new TextDecoder("latin1");

/** A pickle that failed to parse, with the globals it had named before the failure (a scanner reports them). */
export class PickleFailure extends SafetensorError {
  constructor(
    error: SafetensorError,
    readonly globals: Map<string, GlobalRecord>,
  ) {
    super(error.code, error.message);
  }
}

/** Thrown when `bytes` is only a prefix of the stream (`truncated`) and the pickle runs past its end. */
export class NeedMoreBytes extends Error {}

/**
 * Run one pickle from `bytes[start]`. With `truncated`, running out of bytes throws NeedMoreBytes so the caller can
 * retry with a longer prefix of the stream.
 */
export function runPickle(bytes: Uint8Array, start = 0, limits: PickleLimits = {}, truncated = false): PickleResult {
  const globals = new Map<string, GlobalRecord>();
  try {
    return run(bytes, start, limits, truncated, globals);
  } catch (error) {
    if (error instanceof SafetensorError && !(error instanceof PickleFailure)) throw new PickleFailure(error, globals);
    throw error;
  }
}

function run(
  bytes: Uint8Array,
  start: number,
  limits: PickleLimits,
  truncated: boolean,
  globals: Map<string, GlobalRecord>,
): PickleResult {
  const lim = { ...DEFAULT_PICKLE_LIMITS, ...limits };
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const end = bytes.length;
  const stack: Slot[] = [];
  const marks: number[] = [];
  const memo = new Map<number, PyValue>();
  const persistentIds: PyPersistent[] = [];
  let objects = 0;
  let protocol = 0;
  let pos = start;
  let op = start;

  const need = (n: number): void => {
    if (n < 0 || pos + n > end) {
      if (truncated && n >= 0) throw new NeedMoreBytes();
      fail(`needs ${n} bytes, ${end - pos} left`, op);
    }
  };
  const take = (n: number): Uint8Array => {
    need(n);
    const out = bytes.subarray(pos, pos + n);
    pos += n;
    return out;
  };
  const u8 = (): number => {
    need(1);
    return bytes[pos++]!;
  };
  const u16 = (): number => {
    need(2);
    const v = view.getUint16(pos, true);
    pos += 2;
    return v;
  };
  const u32 = (): number => {
    need(4);
    const v = view.getUint32(pos, true);
    pos += 4;
    return v;
  };
  const i32 = (): number => {
    need(4);
    const v = view.getInt32(pos, true);
    pos += 4;
    return v;
  };
  const u64 = (): number => {
    need(8);
    const v = view.getBigUint64(pos, true);
    pos += 8;
    // Anything beyond the bytes left is refused by the caller's need(); a length past 2^53 certainly is.
    return v > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(v);
  };
  const line = (): string => {
    let i = pos;
    while (i < end && bytes[i] !== 0x0a) i++;
    if (i >= end) {
      if (truncated) throw new NeedMoreBytes();
      fail("line without a newline", op);
    }
    const text = latin1.decode(bytes.subarray(pos, i));
    pos = i + 1;
    return text;
  };
  const decodeUtf8 = (raw: Uint8Array): string => {
    try {
      return utf8.decode(raw);
    } catch {
      return fail("string is not valid UTF-8", op);
    }
  };

  const count = (): void => {
    if (++objects > lim.maxObjects) limit("objects", lim.maxObjects, op);
  };
  const push = (value: PyValue): void => {
    if (stack.length >= lim.maxStack) limit("stack entries", lim.maxStack, op);
    count();
    stack.push(value);
  };
  const pop = (): PyValue => {
    const top = stack.pop();
    if (top === undefined) fail("stack underflow", op);
    if (top === MARK) fail("unexpected MARK on the stack", op);
    return top;
  };
  const peek = (): PyValue => {
    const top = stack[stack.length - 1];
    if (top === undefined) fail("stack underflow", op);
    if (top === MARK) fail("unexpected MARK on the stack", op);
    return top;
  };
  const popMark = (): PyValue[] => {
    const at = marks.pop();
    if (at === undefined) fail("no MARK to pop to", op);
    if (stack[at] !== MARK) fail("MARK lost", op);
    const items = stack.splice(at) as Slot[];
    items.shift();
    if (items.includes(MARK)) fail("nested MARK not closed", op);
    return items as PyValue[];
  };
  const memoPut = (key: number, value: PyValue): void => {
    if (!memo.has(key) && memo.size >= lim.maxMemo) limit("memo entries", lim.maxMemo, op);
    memo.set(key, value);
  };
  const memoGet = (key: number): PyValue => {
    const value = memo.get(key);
    if (value === undefined) fail(`memo key ${key} was never stored`, op);
    return value;
  };
  const intFromBytes = (raw: Uint8Array): number | bigint => {
    if (raw.length > lim.maxIntBytes) limit("bytes in one int", lim.maxIntBytes, op);
    if (raw.length === 0) return 0;
    let v = 0n;
    for (let i = raw.length - 1; i >= 0; i--) v = (v << 8n) | BigInt(raw[i]!);
    if (raw[raw.length - 1]! & 0x80) v -= 1n << BigInt(raw.length * 8);
    return normalizeInt(v);
  };
  const intFromText = (text: string): number | bigint => {
    const t = text.trim().replace(/L$/, "");
    if (t.length > lim.maxIntBytes * 3) limit("digits in one int", lim.maxIntBytes * 3, op);
    if (!/^[+-]?\d+$/.test(t)) fail(`invalid int ${JSON.stringify(text)}`, op);
    return normalizeInt(BigInt(t));
  };
  const recordGlobal = (module: string, name: string, at: number): PyGlobal => {
    const key = `${module}.${name}`;
    let record = globals.get(key);
    if (!record) {
      const c = canonicalGlobal(module, name);
      record = {
        module,
        name,
        resolved: `${c.module}.${c.name}`,
        verdict: classifyGlobal(module, name),
        offsets: [],
        uses: new Set(),
      };
      globals.set(key, record);
    }
    if (record.offsets.length < 16) record.offsets.push(at - start);
    record.uses.add("reference");
    return new PyGlobal(module, name, record.verdict === "safe");
  };
  const markUse = (value: PyValue, use: GlobalUse): void => {
    if (value instanceof PyGlobal) globals.get(`${value.module}.${value.name}`)?.uses.add(use);
  };
  const markPersistent = (value: PyValue, depth: number): void => {
    if (depth > 4) return;
    if (value instanceof PyGlobal) markUse(value, "persistent-id");
    else if (value instanceof PyTuple || value instanceof PyList)
      for (const v of value.items) markPersistent(v, depth + 1);
  };
  /** REDUCE / NEWOBJ: allowlisted data constructors are folded into plain values; everything else is recorded. */
  const call = (callee: PyValue, args: PyValue, via: PyCall["via"], kwargs: PyValue = null): PyValue => {
    markUse(callee, via === "reduce" ? "call" : "instantiate");
    if (callee instanceof PyGlobal && callee.allowed) {
      const folded = fold(callee, args);
      if (folded !== undefined) return folded;
    }
    return new PyCall(callee, args, via, op - start, kwargs);
  };

  for (;;) {
    op = pos;
    if (pos >= end) {
      if (truncated) throw new NeedMoreBytes();
      fail("pickle ends without STOP", op);
    }
    const code = bytes[pos++]!;
    switch (code) {
      case 0x80: // PROTO
        protocol = u8();
        if (protocol > 5) fail(`unsupported protocol ${protocol}`, op);
        break;
      case 0x95: // FRAME: framing only groups opcodes; its length must fit in what is left.
        if (u64() > end - pos) {
          if (truncated) throw new NeedMoreBytes();
          fail("frame longer than the data left", op);
        }
        break;
      case 0x2e: // STOP
        if (stack.length !== 1 || marks.length !== 0) {
          fail(`STOP with ${stack.length} values and ${marks.length} marks on the stack`, op);
        }
        return { value: pop(), length: pos - start, protocol, globals, persistentIds };
      case 0x28: // MARK
        if (marks.length >= lim.maxMarks) limit("nested marks", lim.maxMarks, op);
        if (stack.length >= lim.maxStack) limit("stack entries", lim.maxStack, op);
        marks.push(stack.length);
        stack.push(MARK);
        break;
      case 0x30: // POP
        if (stack[stack.length - 1] === MARK) {
          stack.pop();
          marks.pop();
        } else pop();
        break;
      case 0x31: // POP_MARK
        popMark();
        break;
      case 0x32: // DUP
        push(peek());
        break;
      // Constants and numbers.
      case 0x4e: // NONE
        push(null);
        break;
      case 0x88: // NEWTRUE
        push(true);
        break;
      case 0x89: // NEWFALSE
        push(false);
        break;
      case 0x4a: // BININT
        push(i32());
        break;
      case 0x4b: // BININT1
        push(u8());
        break;
      case 0x4d: // BININT2
        push(u16());
        break;
      case 0x49: {
        // INT (text): "00" / "01" are False / True.
        const text = line();
        if (text === "00") push(false);
        else if (text === "01") push(true);
        else push(intFromText(text));
        break;
      }
      case 0x4c: // LONG (text)
        push(intFromText(line()));
        break;
      case 0x8a: // LONG1
        push(intFromBytes(take(u8())));
        break;
      case 0x8b: {
        // LONG4
        const n = i32();
        if (n < 0) fail("negative LONG4 length", op);
        push(intFromBytes(take(n)));
        break;
      }
      case 0x46: {
        // FLOAT (text)
        const text = line().trim();
        const special = /^([+-]?)(inf|infinity|nan)$/i.exec(text);
        const v = special
          ? special[2]!.toLowerCase() === "nan"
            ? Number.NaN
            : special[1] === "-"
              ? Number.NEGATIVE_INFINITY
              : Number.POSITIVE_INFINITY
          : Number(text);
        if (Number.isNaN(v) && !special) fail(`invalid float ${JSON.stringify(text)}`, op);
        push(new PyFloat(v));
        break;
      }
      case 0x47: // BINFLOAT: big-endian double.
        need(8);
        push(new PyFloat(view.getFloat64(pos, false)));
        pos += 8;
        break;
      // Strings and bytes.
      case 0x58: // BINUNICODE
        push(decodeUtf8(take(u32())));
        break;
      case 0x8c: // SHORT_BINUNICODE
        push(decodeUtf8(take(u8())));
        break;
      case 0x8d: // BINUNICODE8
        push(decodeUtf8(take(u64())));
        break;
      case 0x56: // UNICODE (raw-unicode-escape line)
        push(rawUnicodeEscape(line(), op));
        break;
      case 0x53: // STRING (quoted Python 2 str); Python 3 decodes it as a str.
        push(quotedString(line(), op));
        break;
      case 0x54: {
        // BINSTRING
        const n = i32();
        if (n < 0) fail("negative BINSTRING length", op);
        push(latin1.decode(take(n)));
        break;
      }
      case 0x55: // SHORT_BINSTRING
        push(latin1.decode(take(u8())));
        break;
      case 0x42: // BINBYTES
        push(new PyBytes(take(u32())));
        break;
      case 0x43: // SHORT_BINBYTES
        push(new PyBytes(take(u8())));
        break;
      case 0x8e: // BINBYTES8
        push(new PyBytes(take(u64())));
        break;
      case 0x96: // BYTEARRAY8
        push(new PyBytes(take(u64()), true));
        break;
      case 0x97: // NEXT_BUFFER: out-of-band data, which a file cannot supply.
        fail("NEXT_BUFFER refers to out-of-band buffers, which a checkpoint file cannot carry", op);
        break;
      case 0x98: // READONLY_BUFFER
        peek();
        break;
      // Containers.
      case 0x29: // EMPTY_TUPLE
        push(new PyTuple([]));
        break;
      case 0x85: // TUPLE1
        push(new PyTuple([pop()]));
        break;
      case 0x86: {
        // TUPLE2
        const b = pop();
        push(new PyTuple([pop(), b]));
        break;
      }
      case 0x87: {
        // TUPLE3
        const c = pop();
        const b = pop();
        push(new PyTuple([pop(), b, c]));
        break;
      }
      case 0x74: // TUPLE
        push(new PyTuple(popMark()));
        break;
      case 0x5d: // EMPTY_LIST
        push(new PyList());
        break;
      case 0x6c: // LIST
        push(new PyList(popMark()));
        break;
      case 0x7d: // EMPTY_DICT
        push(new PyDict());
        break;
      case 0x64: {
        // DICT
        const items = popMark();
        if (items.length % 2) fail("DICT with an odd number of items", op);
        const dict = new PyDict();
        for (let i = 0; i < items.length; i += 2) dict.set(items[i]!, items[i + 1]!);
        push(dict);
        break;
      }
      case 0x8f: // EMPTY_SET
        push(new PySet());
        break;
      case 0x91: // FROZENSET
        push(new PySet(popMark(), true));
        break;
      case 0x61: {
        // APPEND
        const item = pop();
        appendTo(peek(), [item]);
        break;
      }
      case 0x65: {
        // APPENDS
        const items = popMark();
        appendTo(peek(), items);
        break;
      }
      case 0x90: {
        // ADDITEMS
        const items = popMark();
        const target = peek();
        if (!(target instanceof PySet) || target.frozen) fail("ADDITEMS on something that is not a set", op);
        for (const item of items) target.items.push(item);
        break;
      }
      case 0x73: {
        // SETITEM
        const value = pop();
        const key = pop();
        setItems(peek(), [key, value]);
        break;
      }
      case 0x75: {
        // SETITEMS
        const items = popMark();
        if (items.length % 2) fail("SETITEMS with an odd number of items", op);
        setItems(peek(), items);
        break;
      }
      // Memo.
      case 0x70: // PUT
        memoPut(intOrFail(intFromText(line()), op), peek());
        break;
      case 0x71: // BINPUT
        memoPut(u8(), peek());
        break;
      case 0x72: // LONG_BINPUT
        memoPut(u32(), peek());
        break;
      case 0x94: // MEMOIZE
        memoPut(memo.size, peek());
        break;
      case 0x67: // GET
        push(memoGet(intOrFail(intFromText(line()), op)));
        break;
      case 0x68: // BINGET
        push(memoGet(u8()));
        break;
      case 0x6a: // LONG_BINGET
        push(memoGet(u32()));
        break;
      // Globals and objects: recorded, never resolved.
      case 0x63: {
        // GLOBAL
        const module = line();
        const name = line();
        push(recordGlobal(module, name, op));
        break;
      }
      case 0x93: {
        // STACK_GLOBAL
        const name = pop();
        const module = pop();
        if (typeof module !== "string" || typeof name !== "string") fail("STACK_GLOBAL needs two strings", op);
        push(recordGlobal(module, name, op));
        break;
      }
      case 0x82: // EXT1
      case 0x83: // EXT2
      case 0x84: {
        // EXT4: the copyreg extension registry names globals by number; nothing registers any for checkpoints.
        const n = code === 0x82 ? u8() : code === 0x83 ? u16() : i32();
        const g = recordGlobal("copyreg._extension_registry", String(n), op);
        globals.get(`copyreg._extension_registry.${n}`)?.uses.add("extension");
        push(g);
        break;
      }
      case 0x52: {
        // REDUCE
        const args = pop();
        const callee = pop();
        push(call(callee, args, "reduce"));
        break;
      }
      case 0x81: {
        // NEWOBJ
        const args = pop();
        const cls = pop();
        push(call(cls, args, "newobj"));
        break;
      }
      case 0x92: {
        // NEWOBJ_EX
        const kwargs = pop();
        const args = pop();
        const cls = pop();
        push(call(cls, args, "newobj", kwargs));
        break;
      }
      case 0x6f: {
        // OBJ: MARK cls args… OBJ
        const items = popMark();
        if (items.length === 0) fail("OBJ without a class", op);
        const cls = items.shift()!;
        push(call(cls, new PyTuple(items), "obj"));
        break;
      }
      case 0x69: {
        // INST: MARK args… INST module\nname\n
        const module = line();
        const name = line();
        const cls = recordGlobal(module, name, op);
        push(call(cls, new PyTuple(popMark()), "inst"));
        break;
      }
      case 0x62: {
        // BUILD
        const state = pop();
        const target = peek();
        if (target instanceof PyCall) {
          markUse(target.callee, "build");
          target.state = state;
        } else if (target instanceof PyDict) {
          target.state = state;
        } else {
          fail(`BUILD on a ${typeof target === "object" && target ? target.constructor.name : typeof target}`, op);
        }
        break;
      }
      case 0x50: {
        // PERSID (text)
        const pid = new PyPersistent(line(), op - start);
        persistentIds.push(pid);
        push(pid);
        break;
      }
      case 0x51: {
        // BINPERSID
        const pid = new PyPersistent(pop(), op - start);
        markPersistent(pid.pid, 0);
        persistentIds.push(pid);
        push(pid);
        break;
      }
      default:
        fail(`unknown opcode 0x${code.toString(16).padStart(2, "0")}`, op);
    }
  }

  function appendTo(target: PyValue, items: PyValue[]): void {
    if (target instanceof PyList) target.items.push(...items);
    else if (target instanceof PyCall) target.appended.push(...items);
    else fail("APPEND on something that is not a list", op);
  }

  function setItems(target: PyValue, items: PyValue[]): void {
    if (target instanceof PyDict) {
      for (let i = 0; i < items.length; i += 2) target.set(items[i]!, items[i + 1]!);
    } else if (target instanceof PyCall) {
      for (let i = 0; i < items.length; i += 2) target.setItems.push([items[i]!, items[i + 1]!]);
    } else {
      fail("SETITEM on something that is not a dict", op);
    }
  }

  /** Allowlisted constructors of plain data, evaluated by the machine itself. undefined: keep the call symbolic. */
  function fold(callee: PyGlobal, args: PyValue): PyValue | undefined {
    const c = canonicalGlobal(callee.module, callee.name);
    const name = `${c.module}.${c.name}`;
    const a = args instanceof PyTuple ? args.items : null;
    if (!a) return undefined;
    switch (name) {
      case "collections.OrderedDict":
      case "collections.Counter": {
        if (a.length !== 0) return undefined;
        return new PyDict(name === "collections.OrderedDict" ? "OrderedDict" : "Counter");
      }
      case "builtins.set":
      case "builtins.frozenset": {
        const items =
          a.length === 0
            ? []
            : a.length === 1 && (a[0] instanceof PyList || a[0] instanceof PyTuple)
              ? a[0].items
              : null;
        return items ? new PySet([...items], name === "builtins.frozenset") : undefined;
      }
      case "builtins.bytes":
        // Protocols 0–2 write b"" as bytes().
        return a.length === 0 ? new PyBytes(new Uint8Array(0)) : undefined;
      case "builtins.bytearray": {
        if (a.length === 0) return new PyBytes(new Uint8Array(0), true);
        if (a[0] instanceof PyBytes && a.length === 1) return new PyBytes(a[0].bytes, true);
        if (typeof a[0] === "string" && a.length === 2 && (a[1] === "latin1" || a[1] === "latin-1")) {
          const b = latin1Bytes(a[0]);
          return b ? new PyBytes(b, true) : undefined;
        }
        return undefined;
      }
      case "builtins.complex": {
        const re = a[0] instanceof PyFloat ? a[0].value : typeof a[0] === "number" ? a[0] : null;
        const im = a.length < 2 ? 0 : a[1] instanceof PyFloat ? a[1].value : typeof a[1] === "number" ? a[1] : null;
        return re !== null && im !== null && a.length <= 2 ? new PyComplex(re, im) : undefined;
      }
      case "_codecs.encode": {
        // numpy's protocol-2 arrays carry their bytes as _codecs.encode(str, "latin1").
        if (typeof a[0] !== "string" || a.length > 2) return undefined;
        const encoding = a.length === 2 ? a[1] : "utf-8";
        if (encoding === "latin1" || encoding === "latin-1") {
          const b = latin1Bytes(a[0]);
          return b ? new PyBytes(b) : fail("_codecs.encode: character outside latin-1", op);
        }
        if (encoding === "utf-8" || encoding === "utf8") return new PyBytes(new TextEncoder().encode(a[0]));
        return undefined;
      }
      case "torch.Size":
        // torch.Size((2, 3)) is its tuple.
        return a.length === 1 && a[0] instanceof PyTuple ? a[0] : undefined;
      default:
        return undefined;
    }
  }
}

function normalizeInt(v: bigint): number | bigint {
  return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
}

function intOrFail(v: number | bigint, offset: number): number {
  if (typeof v !== "number" || v < 0) fail("memo key out of range", offset);
  return v;
}

function rawUnicodeEscape(text: string, offset: number): string {
  return text.replace(
    /\\u([0-9a-fA-F]{4})|\\U([0-9a-fA-F]{8})/g,
    (_m, a: string | undefined, b: string | undefined) => {
      const cp = Number.parseInt((a ?? b)!, 16);
      if (cp > 0x10ffff) fail("\\U escape out of range", offset);
      return String.fromCodePoint(cp);
    },
  );
}

const ESCAPES: Record<string, string> = {
  n: "\n",
  r: "\r",
  t: "\t",
  "\\": "\\",
  "'": "'",
  '"': '"',
  a: "\x07",
  b: "\b",
  f: "\f",
  v: "\v",
  "0": "\0",
};

function quotedString(text: string, offset: number): string {
  const quote = text[0];
  if ((quote !== "'" && quote !== '"') || text.length < 2 || text[text.length - 1] !== quote) {
    fail("STRING argument is not quoted", offset);
  }
  const body = text.slice(1, -1);
  return body.replace(/\\(x[0-9a-fA-F]{2}|[0-7]{1,3}|.)/g, (_m, e: string) => {
    if (e[0] === "x") return String.fromCharCode(Number.parseInt(e.slice(1), 16));
    if (/^[0-7]+$/.test(e)) return String.fromCharCode(Number.parseInt(e, 8) & 0xff);
    return ESCAPES[e] ?? `\\${e}`;
  });
}
