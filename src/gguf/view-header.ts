/**
 * A GGUF's header as a safetensors `Header`, for the web inspector (`view`): F32, F16, BF16 and integer tensors keep
 * their dtype and shape (numpy order); a block-quantized tensor is shown as its stored bytes (U8, one row of blocks
 * per tensor row), named with its GGUF type in the metadata rows. Scalar metadata become strings, arrays a summary.
 * Offsets are the GGUF's own, so byte ranges read the GGUF file. Pure.
 */
import type { Dtype } from "../format/dtypes.js";
import type { Header, TensorInfo } from "../format/header.js";
import type { GgufHeader } from "./reader.js";
import { displayValue } from "./summary.js";

const SAME: Readonly<Record<string, Dtype>> = {
  F32: "F32",
  F16: "F16",
  BF16: "BF16",
  F64: "F64",
  I8: "I8",
  I16: "I16",
  I32: "I32",
  I64: "I64",
};

export function ggufAsSafetensorsHeader(h: GgufHeader): Header {
  const tensors = new Map<string, TensorInfo>();
  const metadata = new Map<string, string>();
  metadata.set("format", `gguf (version ${h.version})`);
  for (const [key, value] of h.metadata) {
    const shown = displayValue(value);
    metadata.set(key, typeof shown === "string" ? shown : JSON.stringify(shown));
  }
  const ordered = [...h.tensors].sort((a, b) => a.offset - b.offset);
  for (const t of ordered) {
    const shape = [...t.dims].reverse();
    let dtype = SAME[t.type.name];
    if (dtype === undefined) {
      dtype = "U8";
      const rowBytes = (t.dims[0]! / t.type.blockSize) * t.type.typeSize;
      shape.splice(0, shape.length, t.byteLength / rowBytes, rowBytes);
      metadata.set(`tensor ${t.name}`, `${t.type.name} [${[...t.dims].reverse().join(", ")}] (shown as its bytes)`);
    }
    tensors.set(t.name, {
      name: t.name,
      dtype,
      shape,
      dataOffsets: [t.offset, t.offset + t.byteLength],
      byteLength: t.byteLength,
    });
  }
  return {
    headerLength: h.dataOffset - 8,
    dataStart: h.dataOffset,
    dataLength: h.fileSize - h.dataOffset,
    fileLength: h.fileSize,
    metadata,
    tensors,
  };
}
