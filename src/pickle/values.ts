/**
 * The values the symbolic pickle machine builds. Python data maps to plain JS where it is unambiguous (None → null,
 * bool, str → string, int → number when it is a safe integer, else bigint); everything else is a tagged class so
 * that nothing a pickle carries can turn into a JS function, a prototype or a getter.
 */

/** A reference to `module.name` met in GLOBAL / STACK_GLOBAL / INST. Never resolved to anything callable. */
export class PyGlobal {
  constructor(
    readonly module: string,
    readonly name: string,
    /** True when the global is on the allowlist (see globals.ts). */
    readonly allowed: boolean,
  ) {}
  get qualified(): string {
    return `${this.module}.${this.name}`;
  }
}

export class PyFloat {
  constructor(readonly value: number) {}
}

export class PyComplex {
  constructor(
    readonly real: number,
    readonly imag: number,
  ) {}
}

export class PyBytes {
  constructor(
    readonly bytes: Uint8Array,
    readonly mutable = false,
  ) {}
}

export class PyTuple {
  constructor(readonly items: PyValue[]) {}
}

export class PyList {
  constructor(readonly items: PyValue[] = []) {}
}

export class PySet {
  constructor(
    readonly items: PyValue[] = [],
    readonly frozen = false,
  ) {}
}

/** dict, OrderedDict, Counter: entries in insertion order; keys may be any value. */
export class PyDict {
  readonly entries: [PyValue, PyValue][] = [];
  /** Attributes set by BUILD (an OrderedDict state dict's `_metadata`). */
  state: PyValue | undefined = undefined;
  constructor(readonly type: "dict" | "OrderedDict" | "Counter" = "dict") {}

  set(key: PyValue, value: PyValue): void {
    // Python replaces the value of an equal key; only primitive keys compare here, which is what state dicts use.
    if (isPrimitiveKey(key)) {
      for (const entry of this.entries) {
        if (entry[0] === key) {
          entry[1] = value;
          return;
        }
      }
    }
    this.entries.push([key, value]);
  }

  get(key: string): PyValue | undefined {
    for (const [k, v] of this.entries) if (k === key) return v;
    return undefined;
  }
}

function isPrimitiveKey(key: PyValue): boolean {
  return key === null || typeof key === "string" || typeof key === "number" || typeof key === "boolean";
}

/**
 * The symbolic result of calling or instantiating something (REDUCE, NEWOBJ, NEWOBJ_EX, OBJ, INST): nothing was
 * called. An allowlisted callee is interpreted later (torch.ts); any other is a finding and the object is inert.
 */
export class PyCall {
  state: PyValue | undefined = undefined;
  /** Items APPENDed / SETITEMed onto the object after construction. */
  readonly appended: PyValue[] = [];
  readonly setItems: [PyValue, PyValue][] = [];
  constructor(
    readonly callee: PyValue,
    readonly args: PyValue,
    readonly via: "reduce" | "newobj" | "obj" | "inst",
    /** Byte offset of the opcode in the pickle, for reports. */
    readonly offset: number,
    readonly kwargs: PyValue = null,
  ) {}
}

/** A persistent id (PERSID / BINPERSID): resolved by the container (torch storages), never by the pickle. */
export class PyPersistent {
  constructor(
    readonly pid: PyValue,
    readonly offset: number,
  ) {}
}

export type PyValue =
  | null
  | boolean
  | number
  | bigint
  | string
  | PyFloat
  | PyComplex
  | PyBytes
  | PyTuple
  | PyList
  | PySet
  | PyDict
  | PyGlobal
  | PyCall
  | PyPersistent;

/** A Python int as a JS number, or null when it is not an int that fits in a safe integer. */
export function asInt(value: PyValue | undefined): number | null {
  if (typeof value === "number") return value;
  if (typeof value === "boolean") return value ? 1 : 0;
  if (typeof value === "bigint" && value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER))
    return Number(value);
  return null;
}

/** The items of a tuple or list (torch.Size pickles as a tuple), or null. */
export function itemsOf(value: PyValue | undefined): PyValue[] | null {
  if (value instanceof PyTuple || value instanceof PyList) return value.items;
  return null;
}

/** A short description of a value for reports: its Python type. */
export function describe(value: PyValue | undefined): string {
  if (value === undefined) return "nothing";
  if (value === null) return "None";
  if (typeof value === "boolean") return "bool";
  if (typeof value === "number" || typeof value === "bigint") return "int";
  if (typeof value === "string") return "str";
  if (value instanceof PyFloat) return "float";
  if (value instanceof PyComplex) return "complex";
  if (value instanceof PyBytes) return value.mutable ? "bytearray" : "bytes";
  if (value instanceof PyTuple) return "tuple";
  if (value instanceof PyList) return "list";
  if (value instanceof PySet) return value.frozen ? "frozenset" : "set";
  if (value instanceof PyDict) return value.type;
  if (value instanceof PyGlobal) return `global ${value.qualified}`;
  if (value instanceof PyCall) {
    return value.callee instanceof PyGlobal ? `${value.callee.qualified}(…)` : "object built by a call";
  }
  return "persistent id";
}

/** A str's characters as latin-1 bytes (how protocol-2 pickles carry bytes), or null when one is above U+00FF. */
export function latin1Bytes(text: string): Uint8Array | null {
  const out = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c > 0xff) return null;
    out[i] = c;
  }
  return out;
}
