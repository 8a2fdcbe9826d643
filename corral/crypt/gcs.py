"""The GCS JSON API subset the gateway speaks: what gcsfs and google-cloud-storage use with
STORAGE_EMULATOR_HOST pointing at it.

    GET    /storage/v1/b/B                      bucket metadata
    POST   /storage/v1/b                        create a bucket
    GET    /storage/v1/b/B/o                    list (prefix, delimiter, pageToken, maxResults)
    GET    /storage/v1/b/B/o/O[?alt=media]      object metadata, or its bytes (Range honoured)
    GET    /download/storage/v1/b/B/o/O?alt=media
    DELETE /storage/v1/b/B/o/O
    POST   /upload/storage/v1/b/B/o?uploadType=multipart   metadata and bytes in one request
    POST   /upload/storage/v1/b/B/o?uploadType=resumable   start a session (Location header)
    PUT|POST  that Location with Content-Range: bytes A-B/TOTAL|*   send the next chunk
"""

from __future__ import annotations

import base64
import json
import secrets
import urllib.parse
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from corral.crypt.gateway import (
    Gateway,
    S3Error,
    Upload,
    _etag,
    _modified,
    _run,
    checked,
    parse_range,
)

MULTIPART_LIMIT = 64 << 20  # a one-request upload is held whole to split it: keep it bounded
OPEN_UPLOADS = 64  # resumable uploads in progress; beyond, the oldest is dropped


class GcsApi:
    def __init__(self, gateway: Gateway) -> None:
        self.gw = gateway

    def error(self, err: S3Error) -> Response:
        return JSONResponse(
            {
                "error": {
                    "code": err.status,
                    "message": err.message,
                    "errors": [{"reason": err.code}],
                }
            },
            status_code=err.status,
        )

    async def handle(self, request: Request) -> Response:
        raw = request.scope.get("raw_path", b"").decode().split("?")[0]
        parts = [urllib.parse.unquote(p) for p in raw.strip("/").split("/")]
        kind = parts[0]  # /storage/v1/..., /upload/storage/v1/..., /download/storage/v1/...
        rest = parts[2:] if kind == "storage" else parts[3:]
        q, method = request.query_params, request.method
        if kind == "upload":
            if len(rest) != 3 or rest[0] != "b" or rest[2] != "o":
                raise S3Error(404, "notFound", f"no upload endpoint {raw}")
            return await self.upload(request, checked(rest[1], "")[0])
        if rest == ["b"] and method == "POST":
            name, _ = checked((await request.json()).get("name") or "-", "")
            await _run(self.gw.raw.makedirs, name, exist_ok=True)
            return JSONResponse({"kind": "storage#bucket", "name": name, "id": name})
        if len(rest) < 2 or rest[0] != "b":
            raise S3Error(404, "notFound", f"no endpoint {raw}")
        bucket, _ = checked(rest[1], "")
        if len(rest) == 2:
            if not await _run(self.gw.raw.exists, bucket):
                raise S3Error(404, "notFound", f"no bucket {bucket}")
            return JSONResponse({"kind": "storage#bucket", "name": bucket, "id": bucket})
        if rest[2] != "o":
            raise S3Error(404, "notFound", f"no endpoint {raw}")
        _, name = checked(bucket, "/".join(rest[3:]))
        if not name:
            return await self.list(request, bucket)
        path = f"{bucket}/{name}"
        if method == "DELETE":
            await self.gw.info(path)
            await _run(self.gw.fs.rm_file, path)
            return Response(status_code=204)
        if method != "GET":
            raise S3Error(405, "notImplemented", f"{method} on an object")
        info = await self.gw.info(path)
        if q.get("alt") != "media":
            return JSONResponse(self.resource(bucket, name, info))
        size = info["size"]
        span = parse_range(request.headers.get("range"), size)
        start, end = span or (0, size)
        headers = {"Content-Length": str(end - start), "ETag": _etag(info)}
        if span is not None:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        body = await self.gw.stream(path, info, start, end)
        return StreamingResponse(body, status_code=206 if span else 200, headers=headers)

    def resource(self, bucket: str, name: str, info: dict) -> dict:
        stamp = _modified(info)
        generation = str(int(stamp.timestamp() * 1_000_000))
        iso = stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return {
            "kind": "storage#object",
            "id": f"{bucket}/{name}/{generation}",
            "name": name,
            "bucket": bucket,
            "size": str(info["size"]),
            "generation": generation,
            "metageneration": "1",
            "contentType": "application/octet-stream",
            "etag": _etag(info).strip('"'),
            "timeCreated": iso,
            "updated": iso,
            "storageClass": "STANDARD",
        }

    async def list(self, request: Request, bucket: str) -> Response:
        q = request.query_params
        if not await _run(self.gw.raw.exists, bucket):
            raise S3Error(404, "notFound", f"no bucket {bucket}")
        token = q.get("pageToken")
        after = base64.urlsafe_b64decode(token).decode() if token else ""
        if q.get("startOffset") and q["startOffset"] > after:
            after = q["startOffset"][:-1] + chr(ord(q["startOffset"][-1]) - 1) + "\uffff"
        limit = max(1, min(1000, int(q.get("maxResults", "1000"))))
        objects, commons, last = await self.gw.listing(
            bucket, q.get("prefix", ""), q.get("delimiter", ""), after, limit
        )
        end = q.get("endOffset")
        items = [self.resource(bucket, k, i) for k, i in objects if not end or k < end]
        out: dict = {"kind": "storage#objects", "items": items, "prefixes": commons}
        if last is not None:
            out["nextPageToken"] = base64.urlsafe_b64encode(last.encode()).decode()
        return JSONResponse(out)

    async def upload(self, request: Request, bucket: str) -> Response:
        q = request.query_params
        kind = q.get("uploadType")
        if kind == "multipart":
            return await self.multipart(request, bucket)
        if kind != "resumable":
            raise S3Error(400, "invalid", f"uploadType {kind!r}: multipart or resumable")
        upload_id = q.get("upload_id")
        if upload_id is None:
            meta = await request.json() if int(request.headers.get("content-length", 0)) else {}
            name = meta.get("name") or q.get("name")
            if not name:
                raise S3Error(400, "required", "a resumable upload needs an object name")
            checked(bucket, name)
            upload_id = secrets.token_hex(16)
            path = f"{bucket}/{name}"
            if len(self.gw.uploads) >= OPEN_UPLOADS:  # abandoned sessions hold buffers
                oldest = self.gw.uploads.pop(next(iter(self.gw.uploads)))
                await _run(oldest.writer.discard)
            self.gw.uploads[upload_id] = Upload(path, await _run(self.gw.open_writer, path))
            location = f"{request.url.scheme}://{request.headers['host']}{request.url.path}"
            location += f"?uploadType=resumable&upload_id={upload_id}"
            return Response(headers={"Location": location})
        return await self.chunk(request, bucket, upload_id)

    async def chunk(self, request: Request, bucket: str, upload_id: str) -> Response:
        upload = self.gw.uploads.get(upload_id)
        if upload is None:
            raise S3Error(404, "notFound", f"no resumable upload {upload_id}")
        span = request.headers.get("content-range", "bytes */*")[6:]  # "A-B/T", "*/T", "*/*"
        first, _, total = span.partition("/")
        start = int(first.split("-")[0]) if first != "*" else upload.offset
        if start != upload.offset:  # not the next byte: say where we are, the client resends
            return self.resume_incomplete(upload)
        try:
            async for data in request.stream():
                await _run(upload.writer.write, data)
                upload.offset += len(data)
            if total == "*" or upload.offset < int(total):
                return self.resume_incomplete(upload)
            del self.gw.uploads[upload_id]
            await _run(upload.writer.close)
        except BaseException:
            self.gw.uploads.pop(upload_id, None)
            await _run(upload.writer.discard)
            raise
        info = await _run(self.gw.written, upload.path, upload.writer)
        return JSONResponse(self.resource(bucket, upload.path.split("/", 1)[1], info))

    def resume_incomplete(self, upload: Upload) -> Response:
        headers = {"Range": f"bytes=0-{upload.offset - 1}"} if upload.offset else {}
        return Response(status_code=308, headers=headers)

    async def multipart(self, request: Request, bucket: str) -> Response:
        """multipart/related: a JSON part (the metadata) and a data part."""
        ctype = request.headers.get("content-type", "")
        boundary = ctype.partition("boundary=")[2].strip('"')
        if not boundary:
            raise S3Error(400, "invalid", "a multipart upload needs a boundary")
        body = await _bounded(request.stream(), MULTIPART_LIMIT)
        delimiter = b"--" + boundary.encode()
        sections = body.split(delimiter)
        if len(sections) < 4:
            raise S3Error(400, "invalid", "a multipart upload needs a metadata and a data part")
        meta_head, _, meta = sections[1].partition(b"\n\n")
        if not meta:
            meta_head, _, meta = sections[1].partition(b"\r\n\r\n")
        name = json.loads(meta).get("name") or request.query_params.get("name")
        if not name:
            raise S3Error(400, "required", "a multipart upload needs an object name")
        checked(bucket, name)
        data_part = sections[2]
        sep = b"\r\n\r\n" if b"\r\n\r\n" in data_part else b"\n\n"
        data = data_part.split(sep, 1)[1]
        data = data[:-2] if data.endswith(b"\r\n") else data[:-1] if data.endswith(b"\n") else data
        path = f"{bucket}/{name}"

        async def one() -> AsyncIterator[bytes]:
            yield data

        info = await self.gw.receive(path, one())
        return JSONResponse(self.resource(bucket, name, info))


async def _bounded(stream: AsyncIterator[bytes], limit: int) -> bytes:
    out = bytearray()
    async for chunk in stream:
        out += chunk
        if len(out) > limit:
            raise S3Error(413, "tooLarge", f"a one-request upload is limited to {limit} bytes")
    return bytes(out)
