"""Reads and writes on S3 (through s3fs) that keep the data moving.

A read is one GET, however many segments it covers, and its body goes straight from the
client library's network chunks through the decryption to where the plaintext belongs, in
s3fs's event loop: no staging copy of the ciphertext, no fresh ciphertext buffer per batch,
no round trip per batch, and no hand-off to another thread to decrypt (on a loaded machine a
thread that waits for the GIL back after decrypting slows the event loop every transfer
shares). A plain read does the same work but for the decryption, which costs a copy's worth.

A write whose parts upload while the next one fills (S3Upload): the server stores one part
while the client sends the next, where s3fs's writer waits for each part's answer before it
takes more data.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import fsspec
from fsspec.asyn import sync
from fsspec.implementations.dirfs import DirFileSystem

from corral.crypt.format import (
    BATCH_SEGMENTS,
    HEADER_SIZE,
    Header,
    IntegrityError,
    ObjectCipher,
    StreamOpener,
    parse_header,
)

CHUNK = 1 << 20  # most a body read returns at once (the client's own chunks are smaller)
PART = 16 << 20  # an upload's part size
IN_FLIGHT = 2  # parts on the wire at once per upload: memory is (IN_FLIGHT + 1) parts


def s3_under(fs: fsspec.AbstractFileSystem) -> tuple[Any, Callable[[str], str]] | None:
    """The s3fs filesystem `fs` is (or a directory of), and how a path of `fs` reads there;
    None for any other filesystem."""
    full: Callable[[str], str] = str
    if isinstance(fs, DirFileSystem):
        full, fs = fs._join, fs.fs
    if "s3" in ((fs.protocol,) if isinstance(fs.protocol, str) else fs.protocol) and hasattr(
        fs, "_call_s3"
    ):
        return fs, full
    return None


class S3Get:
    """One GET of an object, or of bytes [start, end) of it; its body is read in s3fs's
    event loop (every method but `close` is a coroutine run there)."""

    def __init__(self, s3: Any, path: str, start: int | None = None, end: int | None = None):
        self.s3, self.path = s3, path
        self._range = {} if start is None else {"Range": f"bytes={start}-{end - 1}"}
        self._body: Any = None
        self._rest = memoryview(b"")
        self.length = 0

    async def open(self) -> S3Get:
        bucket, key, version = self.s3.split_path(self.path)
        extra = {"VersionId": version} if version else {}
        response = await self.s3._call_s3(
            "get_object", Bucket=bucket, Key=key, **extra, **self._range
        )
        self._body, self.length = response["Body"], response["ContentLength"]
        return self

    async def _piece(self) -> memoryview:
        if not self._rest:
            self._rest = memoryview(await self._body.read(CHUNK))
        return self._rest

    async def read_exactly(self, n: int) -> bytes:
        pieces, got = [], 0
        while got < n and (piece := await self._piece()):
            take = piece[: n - got]
            pieces.append(bytes(take))
            got += len(take)
            self._rest = piece[len(take) :]
        return b"".join(pieces)

    async def read_rest(self) -> bytes:
        head = bytes(self._rest)
        self._rest = memoryview(b"")
        return head + await self._body.read()

    async def fill(self, opener: StreamOpener, out: memoryview) -> None:
        """Decrypt the next segments into `out` as their ciphertext arrives."""
        opener.start(out)
        while not opener.full:
            piece = await self._piece()
            if not piece:
                raise IntegrityError(
                    f"{opener.cipher.identity}: truncated (the body ended inside segment"
                    f" {opener.index} of {opener.total})"
                )
            self._rest = opener.feed(piece)

    async def finish(self) -> None:
        """Read to the end: the client checks the body's length and checksum there."""
        if self._rest or await self._body.read(CHUNK):
            raise IntegrityError(f"{self.path}: longer than its segments")

    def close(self) -> None:
        if self._body is not None:  # from any thread: the body belongs to the loop
            self.s3.loop.call_soon_threadsafe(self._body.close)


def read_whole(
    s3: Any, path: str, cipher_for: Callable[[Header | None], ObjectCipher | None]
) -> bytes | bytearray:
    """The whole object at `path`, decrypted (`cipher_for(header)`; None: plaintext, read
    as it is) in one GET."""

    async def read() -> bytes | bytearray:
        get = await S3Get(s3, path).open()
        try:
            head = await get.read_exactly(min(get.length, HEADER_SIZE))
            cipher = cipher_for(parse_header(head, path))
            if cipher is None:
                return head + await get.read_rest()
            plain_size = cipher.layout.plain_size(get.length, path)
            out = bytearray(plain_size)
            await get.fill(StreamOpener(cipher, 0, plain_size), memoryview(out))
            await get.finish()
            return out
        finally:
            get.close()

    return sync(s3.loop, read)


def read_range(
    cipher: ObjectCipher,
    s3: Any,
    path: str,
    plain_size: int,
    start: int,
    end: int,
    batch: int = BATCH_SEGMENTS,
) -> Iterator[memoryview]:
    """Plaintext [start, end) (start < end <= plain_size) in pieces of `batch` segments,
    all from one GET of the segments it covers. Each piece has a buffer of its own, handed on
    as it is (a transport may hold on to what it was given after the send returns)."""
    layout = cipher.layout
    first, last = start // layout.segment_size, (end - 1) // layout.segment_size
    get = S3Get(s3, path, *layout.cipher_span(first, last, plain_size))
    try:
        sync(s3.loop, get.open)
        opener = StreamOpener(cipher, first, plain_size)
        for lo in range(first, last + 1, batch):
            hi = min(lo + batch - 1, last)
            base = lo * layout.segment_size
            out = bytearray(min((hi + 1) * layout.segment_size, plain_size) - base)
            sync(s3.loop, get.fill, opener, memoryview(out))
            yield memoryview(out)[max(0, start - base) : end - base]
        sync(s3.loop, get.finish)
    finally:
        get.close()


class S3Upload:
    """A write to S3 whose object appears whole on close() and not at all after discard():
    one PUT for an object smaller than a part, else a multipart upload with up to IN_FLIGHT
    parts uploading while the next one fills."""

    def __init__(self, s3: Any, path: str) -> None:
        self.s3, self.path = s3, path
        bucket, key, _ = s3.split_path(path)
        self._where = {"Bucket": bucket, "Key": key}
        self._part = bytearray(PART)
        self._fill = 0
        self._upload_id: str | None = None
        self._sent: list[Future] = []  # each part's upload, in order: its ETag

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        taken = 0
        while taken < len(view):
            n = min(len(view) - taken, PART - self._fill)
            self._part[self._fill : self._fill + n] = view[taken : taken + n]
            self._fill += n
            taken += n
            if self._fill == PART:
                self._send_part()
        return taken

    def _send_part(self) -> None:
        if self._upload_id is None:
            created = sync(self.s3.loop, self._call, "create_multipart_upload")
            self._upload_id = created["UploadId"]
        if len(self._sent) >= IN_FLIGHT:
            self._sent[-IN_FLIGHT].result()  # at most IN_FLIGHT on the wire
        upload = self._upload(self._taken(), len(self._sent) + 1)
        self._sent.append(asyncio.run_coroutine_threadsafe(upload, self.s3.loop))

    def _taken(self) -> bytearray:
        """The part filled so far, handed over whole (no copy); a fresh one takes its place."""
        part = self._part
        del part[self._fill :]
        self._part, self._fill = bytearray(PART), 0
        return part

    async def _upload(self, body: bytearray, number: int) -> str:
        answer = await self._call(
            "upload_part", Body=body, PartNumber=number, UploadId=self._upload_id
        )
        return answer["ETag"]

    async def _call(self, method: str, **kwargs: Any) -> dict:
        return await self.s3._call_s3(method, **self._where, **kwargs)

    def close(self) -> None:
        if self._upload_id is None:  # one request
            sync(self.s3.loop, self._call, "put_object", Body=self._taken())
        else:
            if self._fill:
                self._send_part()
            parts = [
                {"PartNumber": n, "ETag": sent.result()} for n, sent in enumerate(self._sent, 1)
            ]
            sync(
                self.s3.loop,
                self._call,
                "complete_multipart_upload",
                UploadId=self._upload_id,
                MultipartUpload={"Parts": parts},
            )
        self.s3.invalidate_cache(self.path)

    def discard(self) -> None:
        for sent in self._sent:
            sent.cancel()
        if self._upload_id is not None:
            sync(self.s3.loop, self._call, "abort_multipart_upload", UploadId=self._upload_id)
