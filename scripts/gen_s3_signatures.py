"""SigV4 Authorization headers computed by botocore for the GET range requests our S3 reader sends.

The test signs the same requests with aws4fetch and compares. aws4fetch leaves `Range` unsigned (S3 accepts any
subset of headers, as long as host and the x-amz-* ones are in), so the requests given to botocore carry the headers
aws4fetch signs: Accept-Encoding (sent by the HTTP source), X-Amz-Content-Sha256 (UNSIGNED-PAYLOAD), X-Amz-Date, and
X-Amz-Security-Token with temporary credentials.

Usage: .venv-ref/bin/python scripts/gen_s3_signatures.py [--stdout]   (needs boto3/botocore)
"""
import datetime
import json
import sys
import types
from pathlib import Path
from unittest import mock

import botocore.auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

WHEN = datetime.datetime(2026, 1, 2, 3, 4, 5)
CASES = [
    {
        "url": "https://my-bucket.s3.us-east-1.amazonaws.com/models/model.safetensors",
        "region": "us-east-1",
        "accessKeyId": "AKIDEXAMPLE",
        "secretAccessKey": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
    },
    {
        "url": "http://127.0.0.1:9000/bucket/dir/model-00001-of-00002.safetensors",
        "region": "us-east-1",
        "accessKeyId": "minioadmin",
        "secretAccessKey": "minioadmin",
    },
    {
        "url": "https://s3.eu-west-1.amazonaws.com/my.dotted.bucket/a%20b/%C3%BC%2B%3D%28x%29.safetensors",
        "region": "eu-west-1",
        "accessKeyId": "AKIDEXAMPLE",
        "secretAccessKey": "secret",
        "sessionToken": "FQoGZXIvYXdzEXAMPLETOKEN//==",
    },
]


def sign(case):
    headers = {"Accept-Encoding": "identity"}
    request = AWSRequest(method="GET", url=case["url"], headers=headers)
    # S3 GETs with payload signing off send UNSIGNED-PAYLOAD, as aws4fetch does.
    request.context["client_config"] = types.SimpleNamespace(s3={"payload_signing_enabled": False})
    credentials = Credentials(case["accessKeyId"], case["secretAccessKey"], case.get("sessionToken"))
    with mock.patch.object(botocore.auth, "get_current_datetime", return_value=WHEN):
        botocore.auth.S3SigV4Auth(credentials, "s3", case["region"]).add_auth(request)
    return {
        **case,
        "datetime": WHEN.strftime("%Y%m%dT%H%M%SZ"),
        "authorization": request.headers["Authorization"],
    }


def main():
    text = json.dumps({"botocore": botocore.__version__, "cases": [sign(c) for c in CASES]}, indent=2) + "\n"
    if "--stdout" in sys.argv:
        sys.stdout.write(text)
    else:
        Path(__file__).resolve().parent.parent.joinpath("test/fixtures/s3/sigv4.json").write_text(text)


main()
