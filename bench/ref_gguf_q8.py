"""The reference side of the gguf_q8_0 figure: gguf-py's numpy Q8_0 quantizer (gguf.quants.quantize, what llama.cpp's
converter calls) over the same tensors our `to-gguf --type q8_0` quantizes (every 2-D weight), each read from the
checkpoint, quantized and its blocks written out in order. 1-D tensors are written as float32, as both sides do.

    python bench/ref_gguf_q8.py CHECKPOINT OUT
"""
import sys

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import quantize
from safetensors import safe_open


def main():
    src, out = sys.argv[1], sys.argv[2]
    with safe_open(src, framework="np") as f, open(out, "wb") as o:
        for name in sorted(f.keys()):
            data = f.get_tensor(name)
            if data.ndim >= 2 and data.shape[-1] % 32 == 0:
                o.write(quantize(data, GGMLQuantizationType.Q8_0).tobytes())
            else:
                o.write(data.astype(np.float32).tobytes())


if __name__ == "__main__":
    main()
