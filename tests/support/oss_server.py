"""A small signature-verifying OSS server for tests, on 127.0.0.1.

No maintained emulator checks OSS signatures, so this one does, as OSS documents them and
as oss2 2.19 computes them:

- **V4** (``OSS4-HMAC-SHA256 Credential=AK/DATE/REGION/oss/aliyun_v4_request,
  Signature=...``): canonical request = method, URI-encoded ``/bucket/key`` (slashes
  kept), sorted encoded query (``k`` alone for empty values), sorted ``k:v`` lines of the
  ``x-oss-*``/``content-type``/``content-md5`` (+ AdditionalHeaders) headers, the
  additional-header list, ``x-oss-content-sha256``; signing key = HMAC chain of
  ``"aliyun_v4" + secret`` over date, region, product ``oss``, ``aliyun_v4_request``.
- **V1** (``OSS AK:base64(HMAC-SHA1)``) over method, Content-MD5, Content-Type, Date, the
  ``x-oss-*`` headers and ``/bucket/key`` with sub-resources.
- **STS**: a key may require ``x-oss-security-token`` and expire.
- **Policies**: per key, per bucket, the prefixes it may list and read
  (``oss:ListObjects`` with ``oss:Prefix`` StringLike ``p*``; ``oss:GetObject`` on ``p*``).

Operations: ListObjects (v1, and v2 with ``list-type=2``), GetObject, HeadObject. Errors
are OSS error XML with ``x-oss-request-id``; for HEAD the XML travels base64-encoded in
``x-oss-err``. Codes: InvalidAccessKeyId, SignatureDoesNotMatch, InvalidSecurityToken,
SecurityTokenExpired, AccessDenied, NoSuchBucket, NoSuchKey, RequestTimeTooSkewed.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import mimetypes
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import formatdate, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, quote, unquote
from xml.sax.saxutils import escape

MAX_SKEW_S = 15 * 60
V4_PREFIX = "OSS4-HMAC-SHA256 "
V1_SUBRESOURCES = frozenset(
    [
        "acl",
        "uploads",
        "location",
        "cors",
        "logging",
        "website",
        "referer",
        "lifecycle",
        "delete",
        "append",
        "tagging",
        "objectMeta",
        "uploadId",
        "partNumber",
        "security-token",
        "position",
        "img",
        "style",
        "styleName",
        "replication",
        "replicationProgress",
        "replicationLocation",
        "cname",
        "bucketInfo",
        "comp",
        "qos",
        "live",
        "status",
        "vod",
        "startTime",
        "endTime",
        "symlink",
        "x-oss-process",
        "response-content-type",
        "response-content-language",
        "response-expires",
        "response-cache-control",
        "response-content-disposition",
        "response-content-encoding",
        "restore",
        "callback",
        "callback-var",
        "policy",
        "stat",
        "encryption",
        "versions",
        "versioning",
        "versionId",
        "requestPayment",
        "x-oss-request-payer",
        "sequential",
        "inventory",
        "inventoryId",
        "continuation-token",
        "asyncFetch",
        "worm",
        "wormId",
        "wormExtend",
        "x-oss-traffic-limit",
        "objectInfo",
    ]
)


class OSSFailure(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(code)
        self.status, self.code, self.message = status, code, message


@dataclass
class Key:
    secret: str
    grants: dict[str, list[str]] = field(default_factory=dict)  # bucket -> prefixes
    sts_token: str | None = None
    expires_at: float | None = None


@dataclass
class Seen:
    """One request as the server judged it (for assertions)."""

    method: str
    path: str
    version: str
    key_id: str
    code: str  # "OK" or the error code


def v4_encode(text: str, keep_slash: bool) -> str:
    out = []
    for byte in text.encode():
        char = chr(byte)
        if (char.isascii() and (char.isalnum() or char in "_-~.")) or (keep_slash and char == "/"):
            out.append(char)
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


def _hmac256(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def v4_signing_key(secret: str, date: str, region: str, product: str = "oss") -> bytes:
    key = _hmac256(("aliyun_v4" + secret).encode(), date)
    key = _hmac256(key, region)
    key = _hmac256(key, product)
    return _hmac256(key, "aliyun_v4_request")


class FakeOSS:
    """The server state: buckets with objects, keys with policies, a clock offset."""

    def __init__(self, region: str = "cn-test") -> None:
        self.region = region
        self.buckets: dict[str, dict[str, bytes]] = {}
        self.keys: dict[str, Key] = {}
        self.seen: list[Seen] = []
        self.clock_offset = 0.0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self.connections: set[socket.socket] = set()
        self._thread: threading.Thread | None = None

    # --- setup ------------------------------------------------------------------------
    def add_bucket(self, name: str, objects: dict[str, bytes] | None = None) -> None:
        self.buckets[name] = dict(objects or {})

    def add_key(
        self,
        key_id: str,
        secret: str,
        grants: dict[str, list[str]] | None = None,
        sts_token: str | None = None,
        expires_at: float | None = None,
    ) -> Key:
        key = Key(secret, dict(grants or {}), sts_token, expires_at)
        self.keys[key_id] = key
        return key

    def now(self) -> float:
        return time.time() + self.clock_offset

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeOSS:
        handler = type("Handler", (_Handler,), {"oss": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and cut open keep-alive connections (as an outage would)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        with self._lock:
            for conn in list(self.connections):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)

    def record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)

    def calls(self, key_id: str | None = None) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if key_id is None or s.key_id == key_id]


@dataclass
class Parsed:
    method: str
    bucket: str
    key: str
    query: list[tuple[str, str]]
    headers: dict[str, str]


class _Handler(BaseHTTPRequestHandler):
    oss: FakeOSS
    protocol_version = "HTTP/1.1"
    version: str
    key_id: str

    def log_message(self, format: str, *args: object) -> None:  # quiet
        return

    def setup(self) -> None:
        super().setup()
        with self.oss._lock:
            self.oss.connections.add(self.connection)

    def finish(self) -> None:
        with self.oss._lock:
            self.oss.connections.discard(self.connection)
        super().finish()

    def do_GET(self) -> None:
        self._handle("GET")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    def _parse(self, method: str) -> Parsed:
        raw_path, _, raw_query = self.path.partition("?")
        _, bucket, rest = [*raw_path.split("/", 2), "", ""][:3]
        headers = {k.lower(): v for k, v in self.headers.items()}
        query = parse_qsl(raw_query, keep_blank_values=True)
        return Parsed(method, unquote(bucket), unquote(rest), query, headers)

    def _handle(self, method: str) -> None:
        request_id = uuid.uuid4().hex[:24].upper()
        req = self._parse(method)
        self.version, self.key_id = "none", ""
        try:
            key = self._authenticate(req)
            body, headers = self._operate(req, key)
            self.oss.record(Seen(method, self.path, self.version, self.key_id, "OK"))
            self._reply(200, body, headers, request_id)
        except OSSFailure as failure:
            self.oss.record(Seen(method, self.path, self.version, self.key_id, failure.code))
            self._fail(failure, request_id, head=method == "HEAD")

    # --- authentication ---------------------------------------------------------------
    def _authenticate(self, req: Parsed) -> Key:
        auth = req.headers.get("authorization", "")
        if auth.startswith(V4_PREFIX):
            fields = dict(
                part.strip().split("=", 1)
                for part in auth[len(V4_PREFIX) :].split(",")
                if "=" in part
            )
            self.version, self.key_id = "v4", fields.get("Credential", "").split("/", 1)[0]
            key = self._key(self.key_id, req)
            self._check_v4(req, key, fields)
            return key
        if auth.startswith("OSS "):
            self.key_id, _, signature = auth[4:].rpartition(":")
            self.version = "v1"
            key = self._key(self.key_id, req)
            self._check_v1(req, key, signature)
            return key
        raise OSSFailure(403, "AccessDenied", "You have no right to access this object.")

    def _key(self, key_id: str, req: Parsed) -> Key:
        key = self.oss.keys.get(key_id)
        if key is None:
            raise OSSFailure(
                403,
                "InvalidAccessKeyId",
                "The OSS Access Key Id you provided does not exist in our records.",
            )
        token = req.headers.get("x-oss-security-token")
        if key.sts_token is not None or token is not None:
            if (
                key.sts_token is None
                or token is None
                or not hmac.compare_digest(token, key.sts_token)
            ):
                raise OSSFailure(
                    403, "InvalidSecurityToken", "The security token you provided is invalid."
                )
            if key.expires_at is not None and key.expires_at <= self.oss.now():
                raise OSSFailure(
                    403, "SecurityTokenExpired", "The security token you provided has expired."
                )
        return key

    def _check_skew(self, when: datetime) -> None:
        if abs(when.timestamp() - self.oss.now()) > MAX_SKEW_S:
            raise OSSFailure(
                403,
                "RequestTimeTooSkewed",
                "The difference between the request time and the current time is too large.",
            )

    def _check_v4(self, req: Parsed, key: Key, fields: dict[str, str]) -> None:
        scope_parts = fields.get("Credential", "").split("/")
        stamp = req.headers.get("x-oss-date", "")
        try:
            when = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        except ValueError:
            raise OSSFailure(403, "AccessDenied", "x-oss-date is missing or malformed.") from None
        self._check_skew(when)
        if (
            len(scope_parts) != 5
            or scope_parts[1] != stamp[:8]
            or scope_parts[2] != self.oss.region
            or scope_parts[3] != "oss"
        ):
            raise OSSFailure(
                403,
                "SignatureDoesNotMatch",
                "The request signature we calculated does not match the signature you provided.",
            )
        additional = [h for h in fields.get("AdditionalHeaders", "").split(";") if h]
        scope = "/".join(scope_parts[1:])
        canonical = self._canonical_v4(req, additional)
        to_sign = "\n".join(
            ["OSS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
        )
        expected = hmac.new(
            v4_signing_key(key.secret, stamp[:8], self.oss.region), to_sign.encode(), hashlib.sha256
        ).hexdigest()
        if not hmac.compare_digest(expected, fields.get("Signature", "")):
            raise OSSFailure(
                403,
                "SignatureDoesNotMatch",
                "The request signature we calculated does not match the signature you provided.",
            )

    def _canonical_v4(self, req: Parsed, additional: list[str]) -> str:
        uri = v4_encode(f"/{req.bucket}/{req.key}" if req.bucket else "/", keep_slash=True)
        pairs = sorted((v4_encode(k, False), v4_encode(v, False)) for k, v in req.query)
        query = "&".join(f"{k}={v}" if v else k for k, v in pairs)
        signed = [
            (name, value)
            for name, value in req.headers.items()
            if name.startswith("x-oss-")
            or name in ("content-type", "content-md5")
            or name in additional
        ]
        headers = "".join(f"{name}:{value}\n" for name, value in sorted(signed))
        payload = req.headers.get("x-oss-content-sha256", "UNSIGNED-PAYLOAD")
        return "\n".join([req.method, uri, query, headers, ";".join(sorted(additional)), payload])

    def _check_v1(self, req: Parsed, key: Key, signature: str) -> None:
        date = req.headers.get("x-oss-date") or req.headers.get("date", "")
        try:
            self._check_skew(parsedate_to_datetime(date))
        except (TypeError, ValueError):
            raise OSSFailure(403, "AccessDenied", "Date is missing or malformed.") from None
        oss_headers = sorted((k, v) for k, v in req.headers.items() if k.startswith("x-oss-"))
        subs = sorted((k, v) for k, v in req.query if k in V1_SUBRESOURCES)
        resource = f"/{req.bucket}/{req.key}" if req.bucket else "/"
        if subs:
            resource += "?" + "&".join(f"{k}={v}" if v else k for k, v in subs)
        to_sign = "\n".join(
            [
                req.method,
                req.headers.get("content-md5", ""),
                req.headers.get("content-type", ""),
                date,
                "".join(f"{k}:{v}\n" for k, v in oss_headers) + resource,
            ]
        )
        digest = hmac.new(key.secret.encode(), to_sign.encode(), hashlib.sha1).digest()
        if not hmac.compare_digest(base64.b64encode(digest).decode(), signature):
            raise OSSFailure(
                403,
                "SignatureDoesNotMatch",
                "The request signature we calculated does not match the signature you provided.",
            )

    # --- operations -------------------------------------------------------------------
    def _operate(self, req: Parsed, key: Key) -> tuple[bytes, dict[str, str]]:
        self._bucket(req.bucket)
        prefixes = key.grants.get(req.bucket, [])
        if req.key == "":
            return self._list(req, prefixes)
        if not any(req.key.startswith(p) for p in prefixes):
            raise OSSFailure(
                403,
                "AccessDenied",
                "You have no right to access this object because of bucket acl.",
            )
        objects = self._bucket(req.bucket)
        if req.key not in objects:
            raise OSSFailure(404, "NoSuchKey", "The specified key does not exist.")
        data = objects[req.key]
        headers = {
            "Content-Type": mimetypes.guess_type(req.key)[0] or "application/octet-stream",
            "ETag": '"' + hashlib.md5(data).hexdigest().upper() + '"',
            "Last-Modified": formatdate(self.oss.now(), usegmt=True),
            "x-oss-object-type": "Normal",
            "Content-Length": str(len(data)),
        }
        return (b"" if req.method == "HEAD" else data), headers

    def _bucket(self, name: str) -> dict[str, bytes]:
        if name not in self.oss.buckets:
            raise OSSFailure(404, "NoSuchBucket", "The specified bucket does not exist.")
        return self.oss.buckets[name]

    def _list(self, req: Parsed, prefixes: list[str]) -> tuple[bytes, dict[str, str]]:
        query = dict(req.query)
        prefix = query.get("prefix", "")
        if not any(prefix.startswith(p) for p in prefixes):
            raise OSSFailure(
                403, "AccessDenied", "You have no right to list objects with this prefix."
            )
        objects = self._bucket(req.bucket)
        v2 = query.get("list-type") == "2"
        after = query.get("start-after", "") if v2 else query.get("marker", "")
        token = query.get("continuation-token", "")
        if v2 and token:
            after = max(after, base64.b64decode(token).decode())
        delimiter = query.get("delimiter", "")
        max_keys = max(1, min(int(query.get("max-keys", "100") or 100), 1000))
        entries: list[tuple[str, str]] = []  # (kind, name)
        truncated, last = False, ""
        for name in sorted(k for k in objects if k.startswith(prefix) and k > after):
            common = None
            if delimiter:
                cut = name.find(delimiter, len(prefix))
                common = name[: cut + len(delimiter)] if cut >= 0 else None
            item = ("prefix", common) if common else ("key", name)
            if item in entries:
                continue
            if len(entries) == max_keys:
                truncated = True
                break
            entries.append(item)
            last = max(last, name if item[0] == "key" else item[1] + "\uffff")
        encode = query.get("encoding-type") == "url"
        body = self._list_xml(req.bucket, query, v2, encode, entries, objects, truncated, last)
        return body, {"Content-Type": "application/xml"}

    def _list_xml(
        self,
        bucket: str,
        query: dict[str, str],
        v2: bool,
        encode: bool,
        entries: list[tuple[str, str]],
        objects: dict[str, bytes],
        truncated: bool,
        last: str,
    ) -> bytes:
        def enc(text: str) -> str:
            return escape(quote(text, safe="") if encode else text)

        stamp = datetime.fromtimestamp(self.oss.now(), UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        parts = [
            '<?xml version="1.0" encoding="UTF-8"?>',
            "<ListBucketResult>",
            f"<Name>{escape(bucket)}</Name><Prefix>{enc(query.get('prefix', ''))}</Prefix>",
            f"<MaxKeys>{query.get('max-keys', '100')}</MaxKeys>",
            f"<Delimiter>{enc(query.get('delimiter', ''))}</Delimiter>",
            f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>",
        ]
        if encode:
            parts.append("<EncodingType>url</EncodingType>")
        if truncated and v2:
            token = base64.b64encode(last.encode()).decode()
            parts.append(f"<NextContinuationToken>{enc(token)}</NextContinuationToken>")
        elif truncated:
            parts.append(f"<NextMarker>{enc(last)}</NextMarker>")
        if v2:
            parts.append(f"<KeyCount>{len(entries)}</KeyCount>")
        for kind, name in entries:
            if kind == "prefix":
                parts.append(f"<CommonPrefixes><Prefix>{enc(name)}</Prefix></CommonPrefixes>")
                continue
            data = objects[name]
            parts.append(
                f"<Contents><Key>{enc(name)}</Key><LastModified>{stamp}</LastModified>"
                f'<ETag>"{hashlib.md5(data).hexdigest().upper()}"</ETag><Type>Normal</Type>'
                f"<Size>{len(data)}</Size><StorageClass>Standard</StorageClass></Contents>"
            )
        parts.append("</ListBucketResult>")
        return "".join(parts).encode()

    # --- replies ----------------------------------------------------------------------
    def _reply(self, status: int, body: bytes, headers: dict[str, str], request_id: str) -> None:
        self.send_response(status)
        headers = {"Content-Length": str(len(body)), **headers}
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("x-oss-request-id", request_id)
        self.send_header("Server", "AliyunOSS")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _fail(self, failure: OSSFailure, request_id: str, head: bool) -> None:
        xml = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<Error>'
            f"<Code>{failure.code}</Code><Message>{escape(failure.message)}</Message>"
            f"<RequestId>{request_id}</RequestId><HostId>127.0.0.1</HostId></Error>"
        ).encode()
        if head:
            encoded = base64.b64encode(xml).decode()
            self._reply(
                failure.status, b"", {"x-oss-err": encoded, "Content-Length": "0"}, request_id
            )
        else:
            self._reply(failure.status, xml, {"Content-Type": "application/xml"}, request_id)
