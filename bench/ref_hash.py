"""The reference's twin of `safetensors hash --json FILE` (same bytes on stdout), timed by `npm run bench`:
SHA-256 of the whole file and of each tensor's bytes, in one pass over the file."""

import hashlib
import sys

from ref_common import describe, dumps

CHUNK = 8 << 20

path = sys.argv[1]
header_bytes, _, tensors = describe(path)
whole = hashlib.sha256()
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
        feed(e - b, [whole, h])
        digests.append((t["name"], h.hexdigest()))
entries = ",".join(f"{dumps(name)}:{dumps(digest)}" for name, digest in digests)
sys.stdout.write('{"file_sha256":%s,"tensors":{%s}}\n' % (dumps(whole.hexdigest()), entries))
