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
    TAG,
    Header,
    IntegrityError,
    ObjectCipher,
    SegmentReceiver,
    parse_header,
    part_buffers,
    read_buffers,
)

CHUNK = 1 << 20  # most a body read returns at once (the client's own chunks are smaller)
PART = 16 << 20  # an upload's part size
IN_FLIGHT = 2  # parts on the wire at once per upload: memory is (IN_FLIGHT + 1) parts
MIN_PART = 5 << 20  # S3's least size of a part but the last


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
        self.response: dict = {}
        self._rest = memoryview(b"")
        self.length = 0

    async def open(self) -> S3Get:
        bucket, key, version = self.s3.split_path(self.path)
        extra = {"VersionId": version} if version else {}
        response = await self.s3._call_s3(
            "get_object", Bucket=bucket, Key=key, **extra, **self._range
        )
        self._body, self.length = response["Body"], response["ContentLength"]
        self.response = response
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

    async def receive(self, receiver: SegmentReceiver, out: memoryview, last: bool) -> None:
        """Take the next segments' ciphertext into `out` as it arrives (`receiver.start`);
        `last`: they end the range, so read on to the end of the body as well."""
        receiver.start(out)
        while not receiver.full:
            piece = await self._piece()
            if not piece:
                raise IntegrityError(
                    f"{receiver.cipher.identity}: truncated (the body ended inside segment"
                    f" {receiver.index} of {receiver.total})"
                )
            self._rest = receiver.feed(piece)
        if last:
            await self.finish()

    async def finish(self) -> None:
        """Read to the end: the client checks the body's length and checksum there."""
        if self._rest or await self._body.read(CHUNK):
            raise IntegrityError(f"{self.path}: longer than its segments")

    def close(self) -> None:
        if self._body is not None:  # from any thread: the body belongs to the loop
            self.s3.loop.call_soon_threadsafe(self._body.close)


def info_and_head(s3: Any, path: str) -> tuple[dict, bytes]:
    """The object's info, as a HEAD gives it, and its first HEADER_SIZE bytes, from one
    ranged GET (a HEAD and then a GET of the header took two requests)."""

    async def get() -> tuple[dict, bytes]:
        got = await S3Get(s3, path, 0, HEADER_SIZE).open()
        try:
            head = await got.read_exactly(min(got.length, HEADER_SIZE))
        finally:
            got.close()
        answer = got.response
        whole = answer.get("ContentRange", "").rpartition("/")[2]
        info = {
            "ETag": answer.get("ETag", ""),
            "LastModified": answer.get("LastModified", ""),
            "size": int(whole) if whole.isdigit() else got.length,
            "name": path,
            "type": "file",
            "VersionId": answer.get("VersionId"),
        }
        return info, head

    return sync(s3.loop, get)


def read_whole(
    s3: Any, path: str, cipher_for: Callable[[Header | None], ObjectCipher | None]
) -> bytes | bytearray:
    """The whole object at `path`, decrypted (`cipher_for(header)`; None: plaintext, read
    as it is) in one GET, all in s3fs's event loop: the body is taken in to where its
    plaintext goes and decrypted there, in place. (Many reader threads each decrypting their
    own object and then waiting for the GIL back from the loop every transfer shares cost
    more than the loop decrypting: docs/crypt.md, Performance.)"""

    async def read() -> bytes | bytearray:
        get = await S3Get(s3, path).open()
        try:
            head = await get.read_exactly(min(get.length, HEADER_SIZE))
            cipher = cipher_for(parse_header(head, path))
            if cipher is None:
                return head + await get.read_rest()
            plain_size = cipher.layout.plain_size(get.length, path)
            out = bytearray(plain_size + TAG)
            receiver = SegmentReceiver(cipher, 0, plain_size)
            await get.receive(receiver, memoryview(out), True)
            receiver.open()
            del out[plain_size:]
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
    all from one GET of the segments it covers, each batch taken in by s3fs's event loop and
    decrypted in the calling thread. Each piece is a view of a buffer handed on as it is (a
    transport may hold on to what it was given after the send returns); the buffer is
    reused only once no view of it is left (format.read_buffers)."""
    layout = cipher.layout
    first, last = start // layout.segment_size, (end - 1) // layout.segment_size
    get = S3Get(s3, path, *layout.cipher_span(first, last, plain_size))
    receiver = SegmentReceiver(cipher, first, plain_size)

    async def take(out: memoryview, opening: bool, ending: bool) -> None:
        if opening:  # the request and the first batch in one hand-over to the loop
            await get.open()
        await get.receive(receiver, out, ending)

    try:
        for lo in range(first, last + 1, batch):
            hi = min(lo + batch - 1, last)
            base = lo * layout.segment_size
            length = min((hi + 1) * layout.segment_size, plain_size) - base
            out = read_buffers.get(length + TAG)  # a tag's room to decrypt in place
            sync(s3.loop, take, memoryview(out), lo == first, hi == last)
            receiver.open()
            piece = memoryview(out)[max(0, start - base) : min(end - base, length)]
            read_buffers.give(out)  # reused once the consumer has let go of the piece
            del out
            yield piece
            del piece  # this frame's view would keep the buffer from being reused
    finally:
        get.close()


class S3Upload:
    """A write to S3 whose object appears whole on close() and not at all after discard():
    one PUT for an object smaller than a part, else a multipart upload with up to IN_FLIGHT
    parts uploading while the next one fills.

    `size`, when the object's size is known beforehand (a request's Content-Length), sizes
    the part buffers to fit it; it only saves memory, a wrong one costs a copy. Part buffers
    are reused (format.part_buffers) once their upload is done: a fresh one costs its page
    faults again. A writer can also fill the part in place: `reserve(n)` gives the next n
    bytes of it, `commit(n)` takes them (ObjectCipher encrypts segments there)."""

    def __init__(self, s3: Any, path: str, size: int | None = None) -> None:
        self.s3, self.path = s3, path
        bucket, key, _ = s3.split_path(path)
        self._where = {"Bucket": bucket, "Key": key}
        self._left = size  # bytes expected beyond the parts already sent
        self._part: bytearray | None = None  # taken when the first byte comes
        self._fill = 0
        self._upload_id: str | None = None
        self._sent: list[Future] = []  # each part's upload, in order: its ETag
        self._sizes: dict[int, int] = {}  # id of a part cut short -> the size it had

    def _room(self, n: int) -> bytearray:
        """The part, with room for n more bytes: a part that cannot take them is sent (or,
        below S3's least part size, grown)."""
        part = self._part
        if part is None:
            want = PART if self._left is None or self._left <= 0 else min(PART, self._left)
            part = self._part = part_buffers.get(max(want, n))
        elif len(part) - self._fill < n:
            if self._fill >= MIN_PART:
                self._send_part()
                return self._room(n)
            part.extend(bytes(max(n, PART - len(part))))  # a short size was given: grow
        return part

    def reserve(self, n: int) -> memoryview:
        return memoryview(self._room(n))[self._fill : self._fill + n]

    def commit(self, n: int) -> None:
        self._fill += n

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        taken = 0
        while taken < len(view):
            part = self._room(1)
            n = min(len(view) - taken, len(part) - self._fill)
            part[self._fill : self._fill + n] = view[taken : taken + n]
            self._fill += n
            taken += n
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
        """The part filled so far, handed over whole (no copy); the next write takes
        another buffer."""
        part, fill = self._part if self._part is not None else bytearray(0), self._fill
        if len(part) != fill:
            self._sizes[id(part)] = len(part)  # what it goes back to the pool as
            try:
                del part[fill:]  # within its allocation: no copy
            except BufferError:  # a view of it is still held: send a copy
                part = bytearray(memoryview(part)[:fill])
        if self._left is not None:
            self._left -= fill
        self._part, self._fill = None, 0
        return part

    async def _upload(self, body: bytearray, number: int) -> str:
        answer = await self._call(
            "upload_part", Body=body, PartNumber=number, UploadId=self._upload_id
        )
        self._give(body)
        return answer["ETag"]

    def _give(self, body: bytearray) -> None:
        """A part answered, so no longer in use, back to the pool at its size (a part cut
        short grows back within its allocation; as taken again, its size must match)."""
        size = self._sizes.pop(id(body), len(body))
        if len(body) < size // 2:
            return  # cut to less than half its size, so reallocated: not kept
        body += bytes(size - len(body))
        part_buffers.give(body)

    async def _call(self, method: str, **kwargs: Any) -> dict:
        return await self.s3._call_s3(method, **self._where, **kwargs)

    def close(self) -> None:
        if self._upload_id is None:  # one request
            body = self._taken()
            sync(self.s3.loop, self._call, "put_object", Body=body)
            self._give(body)
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
