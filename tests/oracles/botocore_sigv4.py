"""Signs requests with Debian's botocore, the reference nsbox's SigV4 signer is checked
against (tests/unit/sigv4_test.cc).

stdin:  a JSON list of {method, url, headers: {name: value}, body, unsigned_payload,
        access_key, secret_key, session_token, region, timestamp: "YYYYmmddTHHMMSSZ"}
stdout: a JSON list of {authorization, canonical_request}, one per request
"""
import datetime
import json
import sys

import botocore.auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials


class FixedClock(datetime.datetime):
    now_value = None

    @classmethod
    def utcnow(cls):
        return cls.now_value


def sign(spec):
    FixedClock.now_value = datetime.datetime.strptime(spec["timestamp"], "%Y%m%dT%H%M%SZ")
    botocore.auth.datetime.datetime = FixedClock
    credentials = Credentials(spec["access_key"], spec["secret_key"], spec.get("session_token") or None)
    request = AWSRequest(method=spec["method"], url=spec["url"], headers=spec.get("headers", {}),
                         data=spec.get("body", "").encode())
    if spec.get("unsigned_payload"):
        request.context["client_config"] = Config(s3={"payload_signing_enabled": False})
    signer = botocore.auth.S3SigV4Auth(credentials, "s3", spec["region"])
    signer.add_auth(request)
    authorization = request.headers["Authorization"]
    del request.headers["Authorization"]  # what was signed did not include it
    return {"authorization": authorization, "canonical_request": signer.canonical_request(request)}


print(json.dumps([sign(s) for s in json.load(sys.stdin)]))
