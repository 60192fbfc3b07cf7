"""The reference's twin of `safetensors hash --json FILE` (same bytes on stdout), timed by `npm run bench`:
SHA-256 of the whole file, of the data region (kohya's sshs_model_hash, ModelSpec's modelspec.hash_sha256) and of
each tensor's bytes, in one pass over the file, plus A1111's AutoV1 (the 64 KiB at 0x100000, read as A1111 does)."""

import hashlib
import sys

from ref_common import describe, dumps

CHUNK = 8 << 20

path = sys.argv[1]
header_bytes, _, tensors = describe(path)
whole = hashlib.sha256()
data = hashlib.sha256()
buffer = bytearray(CHUNK)
view = memoryview(buffer)
digests = []
with open(path, "rb", buffering=0) as f:

    def feed(length, sinks):
        while length > 0:
            got = f.readinto(view[: min(CHUNK, length)])
            if not got:
                raise SystemExit("file changed while hashing")
            for sink in sinks:
                sink.update(view[:got])
            length -= got

    feed(8 + header_bytes, [whole])
    for t in tensors:
        h = hashlib.sha256()
        b, e = t["data_offsets"]
        feed(e - b, [whole, data, h])
        digests.append((t["name"], h.hexdigest()))
    f.seek(0x100000)
    legacy = hashlib.sha256(f.read(0x10000)).hexdigest()[:8]
file_sha256 = whole.hexdigest()
data_sha256 = data.hexdigest()
fields = [
    ("file_sha256", file_sha256),
    ("data_sha256", data_sha256),
    ("autov1", legacy),
    ("autov2", file_sha256[:10]),
    ("sshs_model_hash", data_sha256),
    ("sshs_legacy_hash", legacy),
    ("modelspec_hash_sha256", "0x" + data_sha256),
]
head = ",".join(f"{dumps(k)}:{dumps(v)}" for k, v in fields)
entries = ",".join(f"{dumps(name)}:{dumps(digest)}" for name, digest in digests)
sys.stdout.write('{%s,"tensors":{%s}}\n' % (head, entries))
