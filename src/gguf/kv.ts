/**
 * An ordered metadata builder. Setting a key again replaces its value in place (gguf-py's writer does the same:
 * the key keeps its first position), so a converter step that overrides an earlier one writes what llama.cpp's
 * converter writes, in its order.
 */
import type { GgufValue, ScalarTypeName } from "./types.js";

export class KvBuilder {
  readonly map = new Map<string, GgufValue>();

  private scalar(type: ScalarTypeName, key: string, value: number | string | boolean | bigint): this {
    this.map.set(key, { type, value });
    return this;
  }
  u32(key: string, value: number): this {
    if (!Number.isInteger(value) || value < 0 || value > 0xffffffff) {
      throw new RangeError(`${key}: ${value} is not a UINT32`);
    }
    return this.scalar("UINT32", key, value);
  }
  i32(key: string, value: number): this {
    return this.scalar("INT32", key, value | 0);
  }
  f32(key: string, value: number): this {
    return this.scalar("FLOAT32", key, Math.fround(value));
  }
  str(key: string, value: string): this {
    return this.scalar("STRING", key, value);
  }
  bool(key: string, value: boolean): this {
    return this.scalar("BOOL", key, value);
  }
  strings(key: string, items: readonly string[]): this {
    this.map.set(key, { type: "ARRAY", value: { itemType: "STRING", items } });
    return this;
  }
  i32s(key: string, items: Int32Array): this {
    this.map.set(key, { type: "ARRAY", value: { itemType: "INT32", items } });
    return this;
  }
  f32s(key: string, items: Float32Array): this {
    this.map.set(key, { type: "ARRAY", value: { itemType: "FLOAT32", items } });
    return this;
  }
  has(key: string): boolean {
    return this.map.has(key);
  }
  delete(key: string): void {
    this.map.delete(key);
  }
}
