"""`corral crypt-proxy`: an HTTP gateway that encrypts what clients store and decrypts what
they read, speaking the S3 subset and the GCS JSON API subset that training code uses.

Clients point their endpoint at it (AWS_ENDPOINT_URL=http://127.0.0.1:9080 for boto3/s3fs,
STORAGE_EMULATOR_HOST=http://127.0.0.1:9080 for gcsfs and google-cloud-storage). Bodies stream
through: a request holds one batch of segments, never a whole object. A GET decrypts its first
batch before answering, so a tampered, swapped or wrong-key object gets a clear 4xx; a failure
further in cuts the connection, which clients report as a short read.

It listens on loopback and does not check clients' signatures: whoever can reach it can read
through it (docs/crypt.md, threat model). The backend is any fsspec filesystem: s3://HOST:PORT
(s3fs, credentials from the usual AWS variables) or file:///DIR (a bucket is a directory);
a /PREFIX after the endpoint keeps every bucket under that backend bucket and prefix.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import hashlib
import re
import secrets
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape

import anyio
import fsspec
from botocore.exceptions import ClientError
from fsspec.implementations.dirfs import DirFileSystem
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from corral.crypt import s3io
from corral.crypt.codec import Codec
from corral.crypt.format import BATCH_SEGMENTS, CryptError, IntegrityError, UnknownKeyError
from corral.crypt.fs import AtomicWriter, EncryptedFileSystem

STAGING = ".corral-uploads/"  # multipart parts wait here, inside their bucket, encrypted
PIECE = 8 << 20  # plaintext per read from the backend, for plaintext objects
FEED = 1 << 20  # request body gathered before a write: fewer thread hops per object
WRITE_BLOCK = 16 << 20  # s3fs's block for its own files (writes go through s3io.S3Upload)


class S3Error(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def backend_filesystem(url: str) -> fsspec.AbstractFileSystem:
    """s3://HOST:PORT[/PREFIX] (s3+https:// for TLS) or file:///DIR[/...]."""
    scheme, _, rest = url.partition("://")
    if scheme == "file":
        root = "/" + rest.lstrip("/")
        return DirFileSystem(path=root, fs=fsspec.filesystem("file", auto_mkdir=True))
    if scheme in ("s3", "s3+https"):
        host, _, prefix = rest.partition("/")
        if not host:
            raise ValueError(f"backend {url!r}: s3://HOST:PORT[/PREFIX] names no endpoint")
        web = "https" if scheme == "s3+https" else "http"
        base = fsspec.filesystem(
            "s3",
            endpoint_url=f"{web}://{host}",
            use_listings_cache=False,
            default_block_size=WRITE_BLOCK,
            skip_instance_cache=True,
            # No CRC32 of every request body: GCM authenticates each segment end to end, and
            # the reader checks it (a transport checksum costs the gateway and the server).
            config_kwargs={"request_checksum_calculation": "when_required"},
        )
        return DirFileSystem(path=prefix.strip("/"), fs=base) if prefix.strip("/") else base
    raise ValueError(f"backend {url!r}: expected s3://HOST:PORT[/PREFIX] or file:///DIR")


async def _run(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs))


def _etag(info: dict) -> str:
    tag = info.get("ETag") or info.get("etag")
    if tag:
        return tag if tag.startswith('"') else f'"{tag}"'
    stamp = f"{info.get('mtime')}-{info.get('size')}".encode()
    return '"' + hashlib.md5(stamp, usedforsecurity=False).hexdigest() + '"'


def _modified(info: dict) -> dt.datetime:
    value = info.get("LastModified") or info.get("mtime") or info.get("updated")
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC)
    if isinstance(value, int | float):
        return dt.datetime.fromtimestamp(value, dt.UTC)
    return dt.datetime.now(dt.UTC)


BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]")


def checked(bucket: str, key: str) -> tuple[str, str]:
    """The bucket and key, if they name an object inside the backend: a bucket is a plain
    name (S3 and GCS rules), a key has no '.' or '..' segment (on a file backend those would
    climb out of the bucket)."""
    if bucket and not BUCKET_NAME.fullmatch(bucket):
        raise S3Error(
            400, "InvalidBucketName", f"bucket names are 3-222 of a-z 0-9 . _ -, got {bucket!r}"
        )
    if "\0" in key or any(part in (".", "..") for part in key.split("/")):
        raise S3Error(
            400, "InvalidArgument", f"object keys may not hold '.' or '..' segments: {key!r}"
        )
    return bucket, key


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """[start, end) for a single `bytes=` range, None for the whole object (no header, or
    one S3 ignores); S3Error 416 when it cannot be satisfied."""
    if not header or not header.startswith("bytes=") or "," in header:
        return None
    first, sep, last = header[6:].strip().partition("-")
    if not sep or not (first.isdigit() or last.isdigit()):
        return None
    if not first:  # suffix: the last N bytes
        n = int(last)
        if n == 0 or size == 0:
            raise S3Error(416, "InvalidRange", f"the range {header} is not satisfiable")
        return max(0, size - n), size
    start = int(first)
    end = int(last) + 1 if last else size
    if last and end <= start:
        return None  # syntactically invalid: ignored, as RFC 9110 says
    if start >= size:
        raise S3Error(416, "InvalidRange", f"the range {header} is not satisfiable")
    return start, min(end, size)


async def aws_chunked(stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Decode an `aws-chunked` body (SigV4 streaming): `hex;sig\\r\\n data \\r\\n ... 0\\r\\n`."""
    buf = bytearray()
    it = stream.__aiter__()

    async def more() -> None:
        chunk = await anext(it, None)
        if chunk is None:
            raise S3Error(400, "IncompleteBody", "the aws-chunked body ended early")
        buf.extend(chunk)

    async def line() -> bytes:
        while (at := buf.find(b"\r\n")) < 0:
            await more()
        text = bytes(buf[:at])
        del buf[: at + 2]
        return text

    while True:
        try:
            size = int((await line()).split(b";")[0], 16)
        except ValueError:
            raise S3Error(400, "InvalidRequest", "malformed aws-chunked body") from None
        if size == 0:
            return
        while size:
            if not buf:
                await more()
            take = min(size, len(buf))
            yield bytes(buf[:take])
            del buf[:take]
            size -= take
        await line()


def body_size(request: Request) -> int | None:
    """The size of a request's body as the request says (an aws-chunked one's decoded)."""
    said = request.headers.get("x-amz-decoded-content-length") or request.headers.get(
        "content-length"
    )
    return int(said) if said and said.isdigit() else None


@dataclass
class Upload:
    """A GCS resumable upload in progress: its writer stays open between requests."""

    path: str
    writer: Any
    offset: int = 0


class Gateway:
    def __init__(
        self,
        backend: fsspec.AbstractFileSystem,
        codec: Codec | None,
        domain: str = "localhost",
        refuse_plaintext: bool = False,
    ):
        self.raw = backend
        # Without a codec the gateway passes bytes through: the baseline for a benchmark.
        self.fs = (
            EncryptedFileSystem(fs=backend, codec=codec, refuse_plaintext=refuse_plaintext)
            if codec
            else backend
        )
        self.domain = domain
        self.uploads: dict[str, Upload] = {}

    # --- objects (shared by both APIs) --------------------------------------------------------

    async def info(self, path: str) -> dict:
        """The object's plaintext info; under "stored", the backend's (a read then needs
        no second request for it)."""
        return await _run(self._info, path)

    def _info(self, path: str) -> dict:
        """info() in one thread hand-over."""
        try:
            stored = self._first_look(path) or self.raw.info(path)
        except FileNotFoundError:
            raise S3Error(404, "NoSuchKey", f"no object {path}") from None
        if stored.get("type") != "file":
            raise S3Error(404, "NoSuchKey", f"no object {path}")
        if isinstance(self.fs, EncryptedFileSystem):
            return {**self.fs._plain_info(dict(stored)), "stored": stored}
        return {**stored, "stored": stored}

    def _first_look(self, path: str) -> dict | None:
        """For an object on S3 whose header this encrypting gateway has not seen (it was
        started since the write: a job's restore), its info and header from one ranged GET,
        so that a read costs the backend two requests, as a plain one does, not three (a
        HEAD, a GET of the header, the GET). None: ask the backend's info() instead."""
        s3 = s3io.s3_under(self.raw)
        if not isinstance(self.fs, EncryptedFileSystem) or s3 is None or self.fs.knows(path):
            return None
        try:
            info, head = s3io.info_and_head(s3[0], s3[1](path))
        except (OSError, ClientError):
            # info() tells a missing object from a directory; an empty one (416 to the
            # range) or a refusal is read, or reported, as before.
            return None
        info["name"] = path
        self.fs.keep_head(path, info, head)
        return info

    def pieces(self, path: str, info: dict, start: int, end: int) -> Iterator[bytes]:
        """Plaintext [start, end) of the object, a batch at a time (runs in a thread)."""
        size = info["size"]
        if isinstance(self.fs, EncryptedFileSystem):
            cipher, _ = self.fs.reader(path, info["stored"])
            if cipher is not None:
                yield from self.fs.pieces(path, cipher, size, start, end, BATCH_SEGMENTS)
                return
        for at in range(start, end, PIECE):
            yield self.raw.cat_file(path, start=at, end=min(end, at + PIECE))

    async def stream(self, path: str, info: dict, start: int, end: int) -> AsyncIterator[bytes]:
        """The pieces, the first one already read: errors before the answer are clean ones."""
        pieces = self.pieces(path, info, start, end)
        first = await _run(next, pieces, b"")

        async def rest() -> AsyncIterator[bytes]:
            nonlocal first
            if first:
                piece, first = first, b""  # let go of it once sent: its buffer is reused
                yield piece
            while piece := await _run(next, pieces, b""):
                yield piece

        return rest()

    async def receive(self, path: str, body: AsyncIterator[bytes], size: int | None = None) -> dict:
        """Store the body at `path` as it arrives; the object appears only once it is whole.
        `size`: the body's, if the request says. Returns the new object's info."""
        writer = await _run(self.open_writer, path, size)
        try:
            pending = bytearray()
            async for chunk in body:
                pending += chunk
                if len(pending) >= FEED:
                    await _run(writer.write, pending)
                    pending.clear()
            await _run(writer.write, pending)
            await _run(writer.close)
        except BaseException:
            await _run(writer.discard)
            raise
        return await _run(self.written, path, writer)

    def written(self, path: str, writer: Any) -> dict:
        info = self.raw.info(path)
        if isinstance(self.fs, EncryptedFileSystem):
            return self.fs.remember(path, info, writer.cipher.header)
        return info

    def open_writer(self, path: str, size: int | None = None) -> Any:
        if isinstance(self.fs, EncryptedFileSystem):
            return self.fs.open(path, "wb", size=size)
        return AtomicWriter(self.fs, path, size)

    def concatenate(self, sources: list[str], target: str) -> None:
        """Write the sources' plaintext, one after another, as the object `target` (a copy
        re-encrypts: the new object has its own identity and data key)."""
        writer = self.open_writer(target)
        try:
            for source in sources:
                with self.fs.open(source, "rb") as src:
                    while chunk := src.read(PIECE):
                        writer.write(chunk)
            writer.close()
        except BaseException:
            writer.discard()
            raise

    # --- S3 -----------------------------------------------------------------------------------

    def address(self, request: Request) -> tuple[str, str]:
        """(bucket, key): virtual-host style (bucket.DOMAIN) or path style (/bucket/key)."""
        host = request.headers.get("host", "").rsplit(":", 1)[0]
        path = urllib.parse.unquote(request.scope.get("raw_path", b"").decode().split("?")[0])
        path = path.lstrip("/")
        for domain in {self.domain, "localhost"}:
            if host.endswith("." + domain):
                return checked(host[: -len(domain) - 1], path)
        bucket, _, key = path.partition("/")
        return checked(bucket, key)

    async def s3(self, request: Request) -> Response:
        bucket, key = self.address(request)
        q, method = request.query_params, request.method
        if not bucket:
            if method == "GET":
                return await self.list_buckets()
            raise S3Error(405, "MethodNotAllowed", f"{method} / is not supported")
        if key.startswith(STAGING):
            raise S3Error(403, "AccessDenied", f"{STAGING} is the gateway's own")
        if not key:
            return await self.s3_bucket(request, bucket)
        path = f"{bucket}/{key}"
        if method in ("GET", "HEAD"):
            return await self.get_object(request, path)
        if method == "PUT":
            if "uploadId" in q:
                return await self.upload_part(request, bucket, q["uploadId"], q["partNumber"])
            if "x-amz-copy-source" in request.headers:
                return await self.copy_object(request, path)
            info = await self.receive(path, self.body(request), body_size(request))
            return Response(headers={"ETag": _etag(info)})
        if method == "DELETE":
            if "uploadId" in q:
                await self.abort(bucket, q["uploadId"])
            else:
                await _run(self.delete, path)
            return Response(status_code=204)
        if method == "POST" and "uploads" in q:
            upload_id = secrets.token_hex(16)
            return _xml(
                "InitiateMultipartUploadResult",
                f"<Bucket>{escape(bucket)}</Bucket><Key>{escape(key)}</Key>"
                f"<UploadId>{upload_id}</UploadId>",
            )
        if method == "POST" and "uploadId" in q:
            return await self.complete(request, bucket, key, q["uploadId"])
        raise S3Error(501, "NotImplemented", f"{method} on an object with {dict(q)}")

    def body(self, request: Request) -> AsyncIterator[bytes]:
        chunked = "aws-chunked" in request.headers.get(
            "content-encoding", ""
        ) or request.headers.get("x-amz-content-sha256", "").startswith("STREAMING-")
        return aws_chunked(request.stream()) if chunked else request.stream()

    def delete(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):  # S3 deletes are idempotent
            self.fs.rm_file(path)

    async def list_buckets(self) -> Response:
        entries = await _run(self.raw.ls, "", detail=True)
        names = sorted(e["name"].strip("/") for e in entries if e.get("type") == "directory")
        buckets = "".join(f"<Bucket><Name>{escape(n)}</Name></Bucket>" for n in names)
        return _xml("ListAllMyBucketsResult", f"<Buckets>{buckets}</Buckets>")

    async def s3_bucket(self, request: Request, bucket: str) -> Response:
        method, q = request.method, request.query_params
        if method == "PUT":
            await _run(self.raw.makedirs, bucket, exist_ok=True)
            return Response()
        if method == "DELETE":
            await _run(self.raw.rmdir, bucket)
            return Response(status_code=204)
        if method == "POST" and "delete" in q:
            return await self.delete_objects(request, bucket)
        if not await _run(self.raw.exists, bucket):
            raise S3Error(404, "NoSuchBucket", f"no bucket {bucket}")
        if method == "HEAD":
            return Response()
        if method == "GET" and "location" in q:
            return _xml("LocationConstraint", "")
        if method == "GET":
            return await self.list_objects(request, bucket)
        raise S3Error(501, "NotImplemented", f"{method} on a bucket with {dict(q)}")

    async def keys(self, bucket: str, prefix: str) -> dict[str, dict]:
        """Every object whose key starts with `prefix`: key -> backend info (sizes not yet
        plaintext: only what a listing returns gets its header read)."""
        base = bucket + ("/" + prefix.rsplit("/", 1)[0] if "/" in prefix else "")
        try:
            found = await _run(self.raw.find, base, detail=True)
        except FileNotFoundError:
            found = {}
        cut = len(bucket) + 1
        return {
            name[cut:]: info
            for name, info in found.items()
            if name[cut:].startswith(prefix) and not name[cut:].startswith(STAGING)
        }

    async def listing(
        self, bucket: str, prefix: str, delimiter: str, after: str, limit: int
    ) -> tuple[list[tuple[str, dict]], list[str], str | None]:
        """(objects, common prefixes, the last key returned if the listing was cut short)."""
        keys = await self.keys(bucket, prefix)
        rows: list[tuple[str, dict | None]] = []
        for key in sorted(keys):
            if key <= after:
                continue
            cut = key.find(delimiter, len(prefix)) if delimiter else -1
            if cut >= 0:
                common = key[: cut + len(delimiter)]
                if common <= after or (rows and rows[-1][0] == common):
                    continue
                rows.append((common, None))
            else:
                rows.append((key, keys[key]))
            if len(rows) > limit:
                break
        more = len(rows) > limit
        rows = rows[:limit]
        objects = [(k, v) for k, v in rows if v is not None]
        infos = await _run(lambda: [self.plain_info(v) for _, v in objects])
        return (
            [(k, i) for (k, _), i in zip(objects, infos, strict=True)],
            [k for k, v in rows if v is None],
            rows[-1][0] if more and rows else None,
        )

    def plain_info(self, info: dict) -> dict:
        if isinstance(self.fs, EncryptedFileSystem):
            try:
                return self.fs._plain_info(dict(info))
            except CryptError:
                return info  # a damaged object is listed as stored; reading it says why
        return info

    async def list_objects(self, request: Request, bucket: str) -> Response:
        q = request.query_params
        v2 = q.get("list-type") == "2"
        prefix, delimiter = q.get("prefix", ""), q.get("delimiter", "")
        token = q.get("continuation-token")
        after = (
            base64.urlsafe_b64decode(token).decode()
            if v2 and token
            else q.get("start-after" if v2 else "marker", "")
        )
        try:
            limit = max(0, min(1000, int(q.get("max-keys", "1000"))))
        except ValueError:
            raise S3Error(400, "InvalidArgument", "max-keys must be an integer") from None
        objects, commons, last = await self.listing(bucket, prefix, delimiter, after, limit)
        url = q.get("encoding-type") == "url"

        def enc(text: str) -> str:
            return escape(urllib.parse.quote(text, safe="/") if url else text)

        parts = [
            f"<Name>{escape(bucket)}</Name><Prefix>{enc(prefix)}</Prefix>",
            f"<MaxKeys>{limit}</MaxKeys><IsTruncated>{str(last is not None).lower()}</IsTruncated>",
        ]
        if delimiter:
            parts.append(f"<Delimiter>{enc(delimiter)}</Delimiter>")
        if url:
            parts.append("<EncodingType>url</EncodingType>")
        if v2:
            parts.append(f"<KeyCount>{len(objects) + len(commons)}</KeyCount>")
            if token:
                parts.append(f"<ContinuationToken>{escape(token)}</ContinuationToken>")
            if last is not None:
                next_token = base64.urlsafe_b64encode(last.encode()).decode()
                parts.append(f"<NextContinuationToken>{next_token}</NextContinuationToken>")
        elif last is not None:
            parts.append(f"<NextMarker>{enc(last)}</NextMarker>")
        for key, info in objects:
            stamp = _modified(info).strftime("%Y-%m-%dT%H:%M:%S.000Z")
            parts.append(
                f"<Contents><Key>{enc(key)}</Key><LastModified>{stamp}</LastModified>"
                f"<ETag>{escape(_etag(info))}</ETag><Size>{info['size']}</Size>"
                "<StorageClass>STANDARD</StorageClass></Contents>"
            )
        parts += [f"<CommonPrefixes><Prefix>{enc(c)}</Prefix></CommonPrefixes>" for c in commons]
        return _xml("ListBucketResult", "".join(parts))

    async def delete_objects(self, request: Request, bucket: str) -> Response:
        body = await request.body()
        try:
            root = ET.fromstring(body)
        except ET.ParseError:
            raise S3Error(400, "MalformedXML", "the Delete body is not XML") from None
        keys = [el.text or "" for el in root.iter() if el.tag.endswith("Key")]
        await _run(lambda: [self.delete(f"{bucket}/{k}") for k in keys])
        done = "".join(f"<Deleted><Key>{escape(k)}</Key></Deleted>" for k in keys)
        return _xml("DeleteResult", done)

    async def get_object(self, request: Request, path: str) -> Response:
        info = await self.info(path)
        size = info["size"]
        span = parse_range(request.headers.get("range"), size)
        start, end = span or (0, size)
        headers = {
            "ETag": _etag(info),
            "Last-Modified": _modified(info).strftime("%a, %d %b %Y %H:%M:%S GMT"),
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
            "Content-Length": str(end - start),
        }
        status = 200
        if span is not None:
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        if request.method == "HEAD":
            return Response(status_code=status, headers=headers)
        body = await self.stream(path, info, start, end)
        return StreamingResponse(body, status_code=status, headers=headers)

    async def copy_object(self, request: Request, path: str) -> Response:
        source = urllib.parse.unquote(request.headers["x-amz-copy-source"]).lstrip("/")
        source = source.split("?versionId=")[0]
        await self.info(source)
        await _run(self.concatenate, [source], path)
        info = await self.info(path)
        stamp = _modified(info).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        return _xml(
            "CopyObjectResult",
            f"<LastModified>{stamp}</LastModified><ETag>{escape(_etag(info))}</ETag>",
        )

    def staging(self, bucket: str, upload_id: str, part: int | None = None) -> str:
        if not upload_id.isalnum():
            raise S3Error(404, "NoSuchUpload", f"no upload {upload_id!r}")
        base = f"{bucket}/{STAGING}{upload_id}"
        return base if part is None else f"{base}/{part:05d}"

    async def upload_part(self, request: Request, bucket: str, upload_id: str, part: str):
        if not part.isdigit() or not 1 <= int(part) <= 10000:
            raise S3Error(400, "InvalidArgument", "partNumber must be 1 to 10000")
        info = await self.receive(
            self.staging(bucket, upload_id, int(part)), self.body(request), body_size(request)
        )
        return Response(headers={"ETag": _etag(info)})

    async def complete(self, request: Request, bucket: str, key: str, upload_id: str):
        try:
            root = ET.fromstring(await request.body())
        except ET.ParseError:
            raise S3Error(
                400, "MalformedXML", "the CompleteMultipartUpload body is not XML"
            ) from None
        numbers = [int(el.text or 0) for el in root.iter() if el.tag.endswith("PartNumber")]
        if not numbers or numbers != sorted(set(numbers)):
            raise S3Error(400, "InvalidPartOrder", "parts must be listed once, in order")
        parts = [self.staging(bucket, upload_id, n) for n in numbers]
        for part in parts:
            if not await _run(self.raw.exists, part):
                raise S3Error(400, "InvalidPart", f"part {part.rsplit('/', 1)[1]} was not uploaded")
        # Joining re-encrypts every part under the object's own key: for a large object that
        # takes longer than a client waits for a first byte (s3fs: 15 s), and a retry would
        # find the parts gone. So, as S3 does, the answer starts at once and white space keeps
        # the connection alive until the result, or an <Error> document, follows (botocore
        # reads an error in a 200 answer to this call as a failure).
        joined = asyncio.ensure_future(self.join(parts, bucket, key, upload_id))
        return StreamingResponse(
            _kept_alive(joined, "CompleteMultipartUploadResult", f"/{bucket}/{key}"),
            media_type="application/xml",
        )

    async def join(self, parts: list[str], bucket: str, key: str, upload_id: str) -> str:
        await _run(self.concatenate, parts, f"{bucket}/{key}")
        await self.abort(bucket, upload_id)
        info = await self.info(f"{bucket}/{key}")
        return (
            f"<Bucket>{escape(bucket)}</Bucket><Key>{escape(key)}</Key>"
            f"<ETag>{escape(_etag(info))}</ETag>"
        )

    async def abort(self, bucket: str, upload_id: str) -> None:
        path = self.staging(bucket, upload_id)
        if await _run(self.raw.exists, path):
            await _run(self.raw.rm, path, recursive=True)


XML_DECLARATION = '<?xml version="1.0" encoding="UTF-8"?>'
KEEP_ALIVE_S = 0.5  # white space this often while a long answer is being made


def _document(root: str, inner: str) -> str:
    return f'<{root} xmlns="http://s3.amazonaws.com/doc/2006-03-01/">{inner}</{root}>'


def _xml(root: str, inner: str, status: int = 200) -> Response:
    body = XML_DECLARATION + _document(root, inner)
    return Response(body, status_code=status, media_type="application/xml")


def _error_document(err: S3Error, resource: str) -> str:
    inner = (
        f"<Code>{err.code}</Code><Message>{escape(err.message)}</Message>"
        f"<Resource>{escape(resource)}</Resource>"
    )
    return f"<Error>{inner}</Error>"


def s3_error(err: S3Error, resource: str) -> Response:
    return Response(
        XML_DECLARATION + _error_document(err, resource),
        status_code=err.status,
        media_type="application/xml",
    )


async def _kept_alive(
    result: asyncio.Future[str], root: str, resource: str
) -> AsyncIterator[bytes]:
    """A 200 answer's body: the XML declaration, a space every KEEP_ALIVE_S until `result`
    is done, then its document, or an <Error> document if it failed."""
    yield XML_DECLARATION.encode()
    while not (await asyncio.wait({result}, timeout=KEEP_ALIVE_S))[0]:
        yield b" "
    try:
        yield _document(root, result.result()).encode()
    except Exception as err:  # the status is sent already: the error goes in the body
        yield _error_document(as_s3_error(err), resource).encode()


def as_s3_error(err: Exception) -> S3Error:
    """What a storage or crypt failure is, told the client in the API's terms."""
    if isinstance(err, S3Error):
        return err
    if isinstance(err, IntegrityError):
        return S3Error(409, "CorralIntegrityError", str(err))
    if isinstance(err, UnknownKeyError | CryptError):
        return S3Error(403, "CorralKeyError", str(err))
    if isinstance(err, FileNotFoundError):
        return S3Error(404, "NoSuchKey", str(err) or "not found")
    if isinstance(err, PermissionError):
        return S3Error(403, "AccessDenied", str(err))
    raise err


def make_app(gateway: Gateway) -> Starlette:
    from corral.crypt.gcs import GcsApi

    gcs = GcsApi(gateway)

    async def handle(request: Request) -> Response:
        path = request.url.path
        is_gcs = path.startswith(("/storage/v1/", "/upload/storage/v1/", "/download/storage/v1/"))
        try:
            return await (gcs.handle(request) if is_gcs else gateway.s3(request))
        except Exception as err:  # noqa: BLE001 - every failure becomes an API error
            error = as_s3_error(err)
            if is_gcs:
                return gcs.error(error)
            if error.status == 416:
                size = await _size_or_none(gateway, request)
                response = s3_error(error, path)
                if size is not None:
                    response.headers["Content-Range"] = f"bytes */{size}"
                return response
            return s3_error(error, path)

    methods = ["GET", "HEAD", "PUT", "POST", "DELETE"]
    return Starlette(routes=[Route("/{path:path}", handle, methods=methods)])


async def _size_or_none(gateway: Gateway, request: Request) -> int | None:
    bucket, key = gateway.address(request)
    try:
        return (await gateway.info(f"{bucket}/{key}"))["size"]
    except S3Error:
        return None
