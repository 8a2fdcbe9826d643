"""The encrypted object format: a fixed header, then segments of AES-256-GCM.

    header   magic(8) version(1) log2(segment size)(1) nonce prefix(7)
             key id length(1) key id(255, zero-padded) wrapped data key(60)
    segment  AES-256-GCM(data key, nonce, plaintext segment, aad) = ciphertext || tag(16)
    nonce    nonce prefix(7) || segment index(4, big-endian) || last-segment flag(1)
    aad      "corral-crypt/1" || object identity ("bucket/key", or a local path)

Every object has at least one segment (an empty object is one empty, final segment), so a
ciphertext's length alone gives the plaintext's. The last-segment flag makes truncation at a
segment boundary fail, the index in the nonce makes reordering fail, the per-object data key and
the identity in the aad make swapping or moving objects fail. The header is authenticated by the
key wrap (its bytes are the wrap's associated data), and it has a fixed size so a key rotation
rewrites it in place. A stream that does not start with the magic is plaintext.
"""

from __future__ import annotations

import math
import os
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

MAGIC = b"\x89CRYPT\r\n"  # the 0x89 keeps text files from ever looking encrypted
VERSION = 1
SEGMENT_LOG2 = 20  # 1 MiB
TAG = 16
KEY_ID_MAX = 255
DATA_KEY_SIZE = 32
WRAPPED_SIZE = 12 + DATA_KEY_SIZE + TAG
_HEADER = struct.Struct(f">8sBB7sB{KEY_ID_MAX}s{WRAPPED_SIZE}s")
HEADER_SIZE = _HEADER.size
_WRAPPED_AT = HEADER_SIZE - WRAPPED_SIZE
_AAD_PREFIX = b"corral-crypt/1\x00"


class CryptError(Exception):
    """Something about an encrypted object or a key is wrong; the message says what."""


class IntegrityError(CryptError):
    """The ciphertext is not what was written: altered, truncated, reordered, moved or swapped."""


class UnknownKeyError(CryptError):
    """The object names a key this key provider does not hold."""


@dataclass(frozen=True, slots=True)
class Header:
    key_id: str
    nonce_prefix: bytes
    wrapped_key: bytes
    segment_log2: int = SEGMENT_LOG2
    version: int = VERSION

    @property
    def segment_size(self) -> int:
        return 1 << self.segment_log2

    def authenticated_part(self) -> bytes:
        """The header bytes the key wrap authenticates: everything but the wrapped key."""
        return self.pack()[:_WRAPPED_AT]

    def pack(self) -> bytes:
        key_id = self.key_id.encode()
        return _HEADER.pack(
            MAGIC,
            self.version,
            self.segment_log2,
            self.nonce_prefix,
            len(key_id),
            key_id,
            self.wrapped_key,
        )


def is_encrypted(prefix: bytes) -> bool:
    return prefix[: len(MAGIC)] == MAGIC


def parse_header(data: bytes, what: str) -> Header | None:
    """The header at the start of `data`, or None when `data` is plaintext."""
    if not is_encrypted(data):
        return None
    if len(data) < HEADER_SIZE:
        raise IntegrityError(f"{what}: truncated inside its header ({len(data)} bytes)")
    _, version, log2, prefix, id_len, key_id, wrapped = _HEADER.unpack_from(data)
    if version != VERSION:
        raise CryptError(f"{what}: format version {version}; this corral reads version {VERSION}")
    if not 12 <= log2 <= 30 or id_len > KEY_ID_MAX or any(key_id[id_len:]):
        raise IntegrityError(f"{what}: the header is malformed (altered?)")
    try:
        key_id_text = key_id[:id_len].decode()
    except UnicodeDecodeError:
        raise IntegrityError(f"{what}: the header's key id is not text (altered?)") from None
    return Header(key_id_text, prefix, wrapped, log2, version)


def new_header(key_id: str, wrap: Callable[[bytes, bytes], bytes]) -> tuple[Header, bytes]:
    """A fresh header and its data key; `wrap(data_key, aad)` seals the key under a KEK."""
    if not key_id or len(key_id.encode()) > KEY_ID_MAX:
        raise CryptError(f"key id must be 1 to {KEY_ID_MAX} bytes, got {key_id!r}")
    data_key = AESGCM.generate_key(256)
    draft = Header(key_id, os.urandom(7), b"\0" * WRAPPED_SIZE)
    return rewrap(draft, data_key, wrap), data_key


def rewrap(header: Header, data_key: bytes, wrap: Callable[[bytes, bytes], bytes]) -> Header:
    """The header with its data key wrapped anew (by another key id, for a rotation)."""
    wrapped = wrap(data_key, header.authenticated_part())
    if len(wrapped) != WRAPPED_SIZE:
        raise CryptError(f"a wrapped data key must be {WRAPPED_SIZE} bytes, got {len(wrapped)}")
    return Header(header.key_id, header.nonce_prefix, wrapped, header.segment_log2)


@dataclass(frozen=True, slots=True)
class Layout:
    """Where plaintext bytes live in the ciphertext, for one segment size."""

    segment_size: int = 1 << SEGMENT_LOG2

    @property
    def stride(self) -> int:
        return self.segment_size + TAG

    def segments(self, plain_size: int) -> int:
        return max(1, math.ceil(plain_size / self.segment_size))

    def cipher_size(self, plain_size: int) -> int:
        return HEADER_SIZE + plain_size + TAG * self.segments(plain_size)

    def plain_size(self, cipher_size: int, what: str) -> int:
        body = cipher_size - HEADER_SIZE
        full, rest = divmod(body, self.stride)
        if body < TAG or 0 < rest < TAG:
            raise IntegrityError(
                f"{what}: truncated ({cipher_size} bytes is not a whole number of segments)"
            )
        return body - TAG * (full + (rest > 0))

    def cipher_span(self, first: int, last: int, plain_size: int) -> tuple[int, int]:
        """Byte range [start, end) of segments first..last in the ciphertext."""
        end_plain = min((last + 1) * self.segment_size, plain_size)
        return HEADER_SIZE + first * self.stride, HEADER_SIZE + end_plain + (last + 1) * TAG


class ObjectCipher:
    """Seals and opens the segments of one object, one after another in the calling thread.
    The binding lets go of the GIL while it runs (a Python thread keeps running beside a
    256 MiB encrypt), so the many objects a checkpoint library writes or reads at once, each
    in its own thread, already use every core; a pool per object would only add handoffs."""

    def __init__(self, header: Header, data_key: bytes, identity: str) -> None:
        self.header = header
        self.identity = identity
        self.layout = Layout(header.segment_size)
        self._key = data_key
        self._aead = AESGCM(data_key)
        self._aad = _AAD_PREFIX + identity.encode()

    def _nonce(self, index: int, last: bool) -> bytes:
        return self.header.nonce_prefix + struct.pack(">IB", index, last)

    def seal_batch(self, plain: memoryview, out: memoryview, first: int, final: bool) -> int:
        """Encrypt `plain` (whole segments but for a final short one) as segments first, ...
        into `out`; returns the ciphertext length. `final`: the batch ends the object."""
        size, stride = self.layout.segment_size, self.layout.stride
        count = max(1, math.ceil(len(plain) / size))

        def seal(i: int) -> None:
            chunk = plain[i * size : (i + 1) * size]
            last = final and i == count - 1
            self._aead.encrypt_into(
                self._nonce(first + i, last),
                chunk,
                self._aad,
                out[i * stride : i * stride + len(chunk) + TAG],
            )

        for i in range(count):
            seal(i)
        return len(plain) + TAG * count

    def seal_in_place(self, view: memoryview, n: int, index: int, final: bool) -> None:
        """Encrypt the segment `index` whose n plaintext bytes start `view`, over
        themselves; its tag lands in the TAG bytes after them."""
        self._aead.encrypt_into(self._nonce(index, final), view[:n], self._aad, view[: n + TAG])

    def open_batch(
        self, cipher: memoryview, out: memoryview, first: int, total_segments: int
    ) -> int:
        """Decrypt the segments first, ... in `cipher` into `out`; returns the plaintext length."""
        stride = self.layout.stride
        count = math.ceil(len(cipher) / stride)
        if len(cipher) - (count - 1) * stride < TAG:
            raise self._failure(first + count - 1, total_segments)

        def open_(i: int) -> None:
            chunk = cipher[i * stride : (i + 1) * stride]
            index = first + i
            try:
                self._aead.decrypt_into(
                    self._nonce(index, index == total_segments - 1),
                    chunk,
                    self._aad,
                    out[i * (stride - TAG) : i * (stride - TAG) + len(chunk) - TAG],
                )
            except InvalidTag:
                raise self._failure(index, total_segments) from None

        for i in range(count):
            open_(i)
        return len(cipher) - TAG * count

    def open_from(self, read_at: Callable[[int, memoryview], int], plain_size: int) -> bytearray:
        """The whole object's plaintext, each segment read by `read_at(offset, view)` (fill
        `view` from that ciphertext offset, return the count) straight to where its plaintext
        goes and decrypted there, output exactly over input (as OpenSSL's GCM allows): the
        read's own copy is the only one, and each segment is decrypted while it is in cache.
        The buffer has a tag's room to spare at the end; the last segment's tag lands there."""
        size, stride = self.layout.segment_size, self.layout.stride
        total = self.layout.segments(plain_size)
        out = bytearray(plain_size + TAG)
        with memoryview(out) as view:
            for index in range(total):
                at = index * size
                with view[at : min(at + size, plain_size) + TAG] as chunk:
                    if read_fully(read_at, HEADER_SIZE + index * stride, chunk) < len(chunk):
                        raise IntegrityError(
                            f"{self.identity}: truncated inside segment {index} of {total}"
                        )
                    try:
                        self._aead.decrypt_into(
                            self._nonce(index, index == total - 1), chunk, self._aad, chunk[:-TAG]
                        )
                    except InvalidTag:
                        raise self._failure(index, total) from None
        del out[plain_size:]
        return out

    def segment_decryptor(self, index: int, total: int) -> Any:
        """A streaming decryptor of one segment: its ciphertext may arrive in pieces
        (`update_into`), its tag comes last (`finalize_with_tag`)."""
        mode = modes.GCM(self._nonce(index, index == total - 1))
        decryptor = Cipher(algorithms.AES(self._key), mode).decryptor()
        decryptor.authenticate_additional_data(self._aad)
        return decryptor

    def _failure(self, index: int, total: int) -> IntegrityError:
        return IntegrityError(
            f"{self.identity}: segment {index} of {total} fails authentication: the object was"
            " altered, truncated or reordered, or it is not this object (moved or swapped)"
        )


def read_fully(read_at: Callable[[int, memoryview], int], offset: int, view: memoryview) -> int:
    """Fill `view` from `offset` on, as far as there is data; returns how much was read."""
    got = 0
    while got < len(view) and (n := read_at(offset + got, view[got:])):
        got += n
    return got


BATCH_SEGMENTS = 8  # segments encrypted per batch: the writer's memory is two batches


class _BufferPool:
    """Writers' batch buffers, reused: a fresh buffer costs a page fault per 4 KiB, more than
    encrypting into one already mapped. Holds at most what was once in use at the same time."""

    def __init__(self) -> None:
        self._free: list[tuple[bytearray, bytearray]] = []
        self._lock = threading.Lock()

    def take(self, segment_size: int) -> tuple[bytearray, bytearray]:
        plain_size = segment_size * BATCH_SEGMENTS
        with self._lock:
            for i, (plain, _) in enumerate(self._free):
                if len(plain) == plain_size:
                    return self._free.pop(i)
        return bytearray(plain_size), bytearray((segment_size + TAG) * BATCH_SEGMENTS)

    def give(self, plain: bytearray, out: bytearray) -> None:
        with self._lock:
            if len(self._free) < 64:
                self._free.append((plain, out))


_BUFFERS = _BufferPool()


class SegmentWriter:
    """Encrypts a byte stream segment by segment, handing ciphertext to `sink` as it goes.

    Memory is one batch of plaintext and one of ciphertext, whatever the stream's length. The
    sink must consume the memoryview it is given before it returns (write or copy it).
    """

    def __init__(self, cipher: ObjectCipher, sink: Callable[[memoryview], object]) -> None:
        self.cipher = cipher
        self.sink = sink
        self._plain, self._out = _BUFFERS.take(cipher.layout.segment_size)
        self._fill = 0
        self._next_segment = 0
        self.plain_size = 0
        self.closed = False
        sink(memoryview(cipher.header.pack()))

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        taken = 0
        batch = len(self._plain)
        while taken < len(view):
            if self._fill == batch:
                # Flushed only once more data comes: the batch holding the end is final.
                self._flush(final=False)
            if self._fill == 0 and len(view) - taken > batch:  # more follows: not final
                self._seal(view[taken : taken + batch], final=False)  # no staging copy
                taken += batch
                continue
            n = min(len(view) - taken, len(self._plain) - self._fill)
            self._plain[self._fill : self._fill + n] = view[taken : taken + n]
            self._fill += n
            taken += n
        self.plain_size += taken
        return taken

    def close(self, last: bytes | bytearray | memoryview = b"") -> None:
        """End the stream, `last` being its final bytes: when nothing waits in the batch they
        are sealed where they lie, so an object written in one piece is never copied."""
        if self.closed:
            return
        view = memoryview(last).cast("B")
        if self._fill or not view:
            self.write(view)
            self._flush(final=True)
        else:
            batch = len(self._plain)
            for at in range(0, len(view), batch):
                self._seal(view[at : at + batch], final=at + batch >= len(view))
            self.plain_size += len(view)
        self.closed = True
        _BUFFERS.give(self._plain, self._out)

    def _flush(self, final: bool) -> None:
        self._seal(memoryview(self._plain)[: self._fill], final)
        self._fill = 0

    def _seal(self, plain: memoryview, final: bool) -> None:
        n = self.cipher.seal_batch(plain, memoryview(self._out), self._next_segment, final)
        self._next_segment += len(plain) // self.cipher.layout.segment_size
        self.sink(memoryview(self._out)[:n])


class InPlaceSegmentWriter:
    """Encrypts a byte stream segment by segment straight into its sink's buffer: each
    segment's plaintext is copied to where its ciphertext goes and sealed there, so a
    stream costs one copy, as writing it plain does (SegmentWriter stages a batch first).

    The sink: `reserve(n)`, a writable view of its next n bytes (it must keep them where
    they are until `commit(n)`, which takes them). `plain_size`, when known, lets the last
    segment reserve only its own length; the stream may still turn out longer or shorter."""

    def __init__(self, cipher: ObjectCipher, sink: Any, plain_size: int | None = None) -> None:
        self.cipher = cipher
        self.sink = sink
        self.expected = plain_size
        self.plain_size = 0
        self.closed = False
        self._seg: memoryview | None = None  # the current segment's place in the sink
        self._room = self._fill = self._index = 0
        header = cipher.header.pack()
        sink.reserve(len(header))[:] = header
        sink.commit(len(header))

    def _reserve(self, kept: bytes | None = None) -> None:
        """Take the sink's room for the next segment (for the current one, a whole
        segment's, when it outgrew the room it had: `kept`, its bytes so far, move along)."""
        size = self.cipher.layout.segment_size
        room = size
        if self.expected is not None and kept is None:
            room = min(size, max(0, self.expected - self._index * size))
        self._seg = None  # no view of the sink held while it moves on
        self._seg = self.sink.reserve(room + TAG)
        self._room = room
        kept = kept or b""
        self._seg[: len(kept)] = kept
        self._fill = len(kept)

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        size = self.cipher.layout.segment_size
        taken = 0
        while taken < len(view):
            if self._seg is None:
                self._reserve()
            elif self._fill == self._room:
                if self._room < size:  # longer than said: this segment is a whole one
                    self._reserve(kept=bytes(self._seg[: self._fill]))
                else:  # sealed only once more data comes: the segment holding the end is final
                    self._seal(final=False)
                    self._reserve()
            n = min(len(view) - taken, self._room - self._fill)
            self._seg[self._fill : self._fill + n] = view[taken : taken + n]
            self._fill += n
            taken += n
        self.plain_size += taken
        return taken

    def close(self, last: bytes | bytearray | memoryview = b"") -> None:
        if self.closed:
            return
        self.write(last)
        if self._seg is None:  # an empty object: one empty, final segment
            self._reserve()
        self._seal(final=True)
        self.closed = True

    def _seal(self, final: bool) -> None:
        n, seg = self._fill, self._seg
        self.cipher.seal_in_place(seg[: n + TAG], n, self._index, final)
        self._seg = None
        del seg
        self.sink.commit(n + TAG)
        self._index += 1
        self._fill = 0


BUFFERS_KEPT = 128 << 20  # bytes of buffers each pool keeps for reuse


def _unexported(buf: bytearray) -> bool:
    """Nothing holds a view of `buf`: a bytearray with exports refuses to resize. (Shrinking
    by one byte and growing back stays within its allocation: no copy.)"""
    try:
        buf.pop()
    except BufferError:
        return False
    buf.append(0)
    return True


class _Buffers:
    """Buffers kept once done with, handed out again for a request of the same size: a
    checkpoint's shards mostly share a size, and a fresh buffer costs a zero fill and its
    page faults again (contended when many threads write at once; about a third of what
    decrypting it costs). A buffer given back while views of it are still in use (a read's
    piece: the transport holds on to it until it is sent) is handed out again only once they
    are all gone. Keeps at most BUFFERS_KEPT bytes, so no more than was once in use."""

    def __init__(self) -> None:
        self._held: list[bytearray] = []  # given back, free once unexported
        self._kept = 0
        self._lock = threading.Lock()

    def get(self, size: int) -> bytearray:
        with self._lock:
            for i, buf in enumerate(self._held):
                if len(buf) == size and _unexported(buf):
                    self._kept -= size
                    return self._held.pop(i)
        return bytearray(size)

    def give(self, buf: bytearray) -> None:
        size = len(buf)
        if not size or size > BUFFERS_KEPT:
            return
        with self._lock:
            while self._held and self._kept + size > BUFFERS_KEPT:
                self._kept -= len(self._held.pop(0))  # the oldest: most likely another size
            self._held.append(buf)
            self._kept += size

    @contextmanager
    def take(self, size: int) -> Iterator[bytearray]:
        buf = self.get(size)
        try:
            yield buf
        finally:
            self.give(buf)


part_buffers = _Buffers()  # whole objects' ciphertext and upload parts
read_buffers = _Buffers()  # what reads decrypt into and hand on as views


@contextmanager
def sealed_whole(cipher: ObjectCipher, data: bytes | bytearray | memoryview) -> Iterator[bytearray]:
    """The whole object's ciphertext, sealed straight into one reused buffer (no staging
    copy), valid inside the `with` block."""
    plain = memoryview(data).cast("B")
    with part_buffers.take(cipher.layout.cipher_size(len(plain))) as out:
        out[:HEADER_SIZE] = cipher.header.pack()
        cipher.seal_batch(plain, memoryview(out)[HEADER_SIZE:], 0, final=True)
        yield out


def open_whole(cipher: ObjectCipher, blob: bytes | bytearray | memoryview) -> bytearray:
    """The plaintext of a whole object's ciphertext (header included), in one buffer."""
    plain_size = cipher.layout.plain_size(len(blob), cipher.identity)
    out = bytearray(plain_size)
    body = memoryview(blob)[HEADER_SIZE:]
    cipher.open_batch(body, memoryview(out), 0, cipher.layout.segments(plain_size))
    return out


def read_range(
    cipher: ObjectCipher,
    fetch: Callable[[int, int], bytes],
    plain_size: int,
    start: int,
    end: int,
    batch: int = BATCH_SEGMENTS,
) -> Iterator[memoryview]:
    """Plaintext [start, end) in pieces, decrypting only the segments it covers; `fetch(a, b)`
    reads ciphertext bytes [a, b). Memory is one batch of segments. Each piece is decrypted
    into a buffer of its own, handed on as it is (a transport may hold on to what it was given
    after the send returns, so a reused buffer would need a copy)."""
    layout = cipher.layout
    end = min(end, plain_size)
    total = layout.segments(plain_size)
    if start >= end:
        if plain_size == 0:  # still authenticate the single empty segment
            a, b = layout.cipher_span(0, 0, 0)
            cipher.open_batch(memoryview(fetch(a, b)), memoryview(bytearray(0)), 0, 1)
        return
    first, last = start // layout.segment_size, (end - 1) // layout.segment_size
    for lo in range(first, last + 1, batch):
        hi = min(lo + batch - 1, last)
        a, b = layout.cipher_span(lo, hi, plain_size)
        data = fetch(a, b)
        if len(data) != b - a:
            raise IntegrityError(
                f"{cipher.identity}: truncated (segments {lo}-{hi} end at byte"
                f" {a + len(data)}, expected {b})"
            )
        out = bytearray(b - a - TAG * (hi - lo + 1))
        cipher.open_batch(memoryview(data), memoryview(out), lo, total)
        base = lo * layout.segment_size
        yield memoryview(out)[max(0, start - base) : end - base]


class SegmentReceiver:
    """Takes in the ciphertext of a run of segments as it arrives, in pieces of any size (a
    response body), each piece's bytes straight to where their plaintext goes (the tags
    aside), then decrypts them there (`open`): one copy, as a plain read makes, and the
    decryption can run in another thread than the one receiving (it lets go of the GIL).

    `start(out)`: the buffer for the next segments' plaintext, whole segments but for the
    object's last, with a tag's room to spare at its end; `feed` fills it and returns what
    of the piece lies beyond; once `full`, `open` decrypts it."""

    def __init__(self, cipher: ObjectCipher, first: int, plain_size: int) -> None:
        self.cipher = cipher
        self.plain_size = plain_size
        self.total = cipher.layout.segments(plain_size)
        self.index = first  # the segment being received
        self._got = 0  # its plaintext bytes received so far
        self._tags = bytearray()  # the tags of the segments received into the buffer
        self._tag_fill = 0
        self._out = memoryview(bytearray(TAG))
        self._at = 0
        self._first = first  # the buffer's first segment

    def start(self, out: memoryview) -> None:
        self._out, self._at, self._first = out, 0, self.index
        self._tags.clear()
        self._tag_fill = 0

    @property
    def full(self) -> bool:
        """The buffer holds all its segments, tags included (an empty one: the empty
        object's single segment)."""
        received = self.index - self._first
        return self._at == len(self._out) - TAG and received > 0 and self._got == 0

    def _segment_length(self) -> int:
        size = self.cipher.layout.segment_size
        return min(size, self.plain_size - self.index * size)

    def feed(self, piece: bytes | bytearray | memoryview) -> memoryview:
        view = memoryview(piece).cast("B")
        room = len(self._out) - TAG
        while view and not self.full:
            if self.index >= self.total:
                raise IntegrityError(f"{self.cipher.identity}: bytes after the last segment")
            want = self._segment_length() - self._got
            if want:
                n = min(want, len(view), room - self._at)
                if n == 0:
                    raise ValueError("the output buffer ends inside a segment")
                self._out[self._at : self._at + n] = view[:n]
                self._at += n
                self._got += n
            else:
                n = min(TAG - self._tag_fill, len(view))
                self._tags += view[:n]
                self._tag_fill += n
                if self._tag_fill == TAG:
                    self._tag_fill = self._got = 0
                    self.index += 1
            view = view[n:]
        return view

    def open(self) -> None:
        """Decrypt the segments received into the buffer, in place: each one's tag is put
        after it (over the next segment's first bytes, kept aside meanwhile) and the segment
        is decrypted over itself, as OpenSSL's GCM allows."""
        size = self.cipher.layout.segment_size
        out, tags, cipher = self._out, self._tags, self.cipher
        at = 0
        for k, index in enumerate(range(self._first, self.index)):
            length = min(size, self.plain_size - index * size)
            end = at + length
            kept = bytes(out[end : end + TAG])
            out[end : end + TAG] = tags[k * TAG : (k + 1) * TAG]
            try:
                cipher._aead.decrypt_into(
                    cipher._nonce(index, index == self.total - 1),
                    out[at : end + TAG],
                    cipher._aad,
                    out[at:end],
                )
            except InvalidTag:
                raise cipher._failure(index, self.total) from None
            finally:
                out[end : end + TAG] = kept
            at = end
        self._out = memoryview(bytearray(TAG))  # the buffer is the caller's again
