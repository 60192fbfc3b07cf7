"""The reference's twin of `safetensors inspect --json FILE` (same bytes on stdout), timed by `npm run bench`."""

import os
import sys

from ref_common import describe, dumps

path = sys.argv[1]
header_bytes, metadata, tensors = describe(path)
parameters = 0
for t in tensors:
    n = 1
    for d in t["shape"]:
        n *= d
    parameters += n
parts = ",".join(
    '{"name":%s,"dtype":%s,"shape":%s,"data_offsets":%s}'
    % (dumps(t["name"]), dumps(t["dtype"]), dumps(t["shape"]), dumps(t["data_offsets"]))
    for t in tensors
)
sys.stdout.write(
    '{"file_bytes":%d,"header_bytes":%d,"metadata":%s,"parameters":%d,"tensors":[%s]}\n'
    % (os.path.getsize(path), header_bytes, dumps(metadata), parameters, parts)
)
