"""`encrypted::` — an fsspec filesystem that encrypts on the way out and decrypts on the way in.

    fsspec.open("encrypted::s3://bucket/ckpt/step_100/model.pt", "wb",
                encrypted={"keyring": "~/.corral/keyring"}, s3={"endpoint_url": ...})

It wraps any fsspec filesystem (s3, gcs, file, ...). An object's identity, bound into its
ciphertext, is its path as the wrapped filesystem names it ("bucket/key", or an absolute local
path), so copying ciphertext elsewhere makes it unreadable: `cp`/`mv` here re-encrypt. Objects
without the format's marker are read as they are, so a bucket can be migrated gradually.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections.abc import Iterator
from functools import partial
from typing import Any

import fsspec
from fsspec.implementations.chained import ChainedFileSystem
from fsspec.spec import AbstractBufferedFile

from corral.crypt import s3io
from corral.crypt.codec import Codec
from corral.crypt.format import (
    HEADER_SIZE,
    Header,
    InPlaceSegmentWriter,
    IntegrityError,
    Layout,
    ObjectCipher,
    SegmentWriter,
    open_whole,
    parse_header,
    read_fully,
    read_range,
    sealed_whole,
)

COPY_CHUNK = 8 << 20
HEADER_CACHE = 100_000  # headers remembered (about 0.5 KiB each)


class EncryptedFileSystem(ChainedFileSystem):
    protocol = "encrypted"

    def __init__(
        self,
        target_protocol: str | None = None,
        target_options: dict | None = None,
        fs: fsspec.AbstractFileSystem | None = None,
        keyring: str | None = None,
        bucket_keys: dict[str, str] | None = None,
        codec: Codec | None = None,
        refuse_plaintext: bool = False,
        fo: str | None = None,  # the chained path fsspec passes along; paths come with calls
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.fs = fs or fsspec.filesystem(target_protocol or "file", **(target_options or {}))
        self.codec = codec or Codec.from_keyring(keyring, bucket_keys)
        # Plaintext objects are read as they are (a bucket being migrated) unless refused:
        # whoever can write the bucket can otherwise plant one.
        self.refuse_plaintext = refuse_plaintext
        # path -> (ciphertext size, version tag, header or None): saves a probe per open/ls.
        self._headers: dict[str, tuple[int, Any, Header | None]] = {}

    @classmethod
    def _strip_protocol(cls, path):
        path = fsspec.core.stringify_path(path)
        if isinstance(path, str) and path.startswith("encrypted://"):
            path = path[len("encrypted://") :]
        return path

    def _target(self, path: str) -> str:
        return self.fs._strip_protocol(self._strip_protocol(path))

    # --- headers ------------------------------------------------------------------------------

    def _header_of(self, path: str, info: dict | None = None) -> tuple[int, Header | None]:
        """(ciphertext size, header or None for plaintext), read once per object version."""
        info = info or self.fs.info(path)
        size, version = info["size"], _version_tag(info)
        cached = self._headers.get(path)
        if cached is not None and cached[:2] == (size, version):
            return size, cached[2]
        header = (
            parse_header(self.fs.cat_file(path, start=0, end=HEADER_SIZE), path) if size else None
        )
        self._keep_header(path, (size, version, header))
        return size, header

    def _keep_header(self, path: str, entry: tuple[int, Any, Header | None]) -> None:
        if len(self._headers) >= HEADER_CACHE:  # a long-lived gateway sees many objects
            self._headers.pop(next(iter(self._headers)))
        self._headers[path] = entry

    def knows(self, path: str) -> bool:
        """A header of the object at `path` is remembered (of some version of it)."""
        return path in self._headers

    def keep_head(self, path: str, info: dict, head: bytes) -> None:
        """Remember the header in `head`, the object's first bytes (`info`, the wrapped
        filesystem's, says which version they are of)."""
        header = parse_header(head, path) if info["size"] else None
        self._keep_header(path, (info["size"], _version_tag(info), header))

    def _plain_info(self, info: dict) -> dict:
        if info.get("type") != "file":
            return info
        size, header = self._header_of(info["name"], info)
        if header is not None:
            info = {**info, "size": Layout(header.segment_size).plain_size(size, info["name"])}
        return info

    def _forget(self, path: str) -> None:
        self._headers.pop(path, None)

    def remember(self, path: str, info: dict, header: Header) -> dict:
        """Record the header of an object just written (its backend `info`), so the next
        read needs no probe; returns the plaintext info."""
        self._keep_header(path, (info["size"], _version_tag(info), header))
        return self._plain_info(dict(info))

    # --- reading ------------------------------------------------------------------------------

    def info(self, path, **kwargs):
        return self._plain_info(dict(self.fs.info(self._target(path), **kwargs)))

    def ls(self, path, detail=True, **kwargs):
        entries = self.fs.ls(self._target(path), detail=detail, **kwargs)
        return [self._plain_info(dict(e)) for e in entries] if detail else entries

    def find(self, path, maxdepth=None, withdirs=False, detail=False, **kwargs):
        found = self.fs.find(
            self._target(path), maxdepth=maxdepth, withdirs=withdirs, detail=detail, **kwargs
        )
        return {k: self._plain_info(dict(v)) for k, v in found.items()} if detail else found

    def exists(self, path, **kwargs):
        return self.fs.exists(self._target(path), **kwargs)

    def isdir(self, path):
        return self.fs.isdir(self._target(path))

    def isfile(self, path):
        return self.fs.isfile(self._target(path))

    def reader(self, path: str, info: dict | None = None) -> tuple[ObjectCipher | None, int]:
        """The cipher of an encrypted object (None for plaintext) and its plaintext size;
        `info`, the wrapped filesystem's, saves asking for it again."""
        path = self._target(path)
        size, header = self._header_of(path, info)
        if header is None:
            return self._plaintext(path, None), size
        cipher = self.codec.open_cipher(header, path)
        return cipher, cipher.layout.plain_size(size, path)

    def _cipher(self, path: str, header: Header | None) -> ObjectCipher | None:
        """The cipher of an object with this header; None: plaintext, unless refused."""
        if header is None:
            return self._plaintext(path, None)
        return self.codec.open_cipher(header, path)

    def _plaintext(self, path: str, value):
        """`value`, the stand-in for a plaintext object, unless plaintext is refused."""
        if self.refuse_plaintext:
            raise IntegrityError(
                f"{path}: not encrypted (no format marker), and plaintext objects are refused"
            )
        return value

    def cat_file(self, path, start=None, end=None, **kwargs):
        path = self._target(path)
        if not start and end is None:  # the whole object: one read, as a plain one takes
            if _is_local(self.fs):
                return self._read_local(path)
            if s3 := s3io.s3_under(self.fs):
                s3fs, full = s3
                return s3io.read_whole(s3fs, full(path), lambda head: self._cipher(path, head))
            blob = self.fs.cat_file(path, **kwargs)
            header = parse_header(blob, path)
            if header is None:
                return self._plaintext(path, blob)
            return open_whole(self.codec.open_cipher(header, path), blob)
        cipher, size = self.reader(path)
        if cipher is None:
            return self.fs.cat_file(path, start=start, end=end, **kwargs)
        return b"".join(self.pieces(path, cipher, size, *_resolve(start, end, size)))

    def pieces(
        self, path: str, cipher: ObjectCipher, size: int, start: int, end: int, batch: int = 64
    ) -> Iterator[memoryview]:
        """Plaintext [start, end) of an encrypted object, `batch` segments at a time: from
        S3, one GET decrypted as it arrives; elsewhere, one ranged read per batch."""
        if start < end and (s3 := s3io.s3_under(self.fs)):
            return s3io.read_range(cipher, s3[0], s3[1](path), size, start, end, batch)
        fetch = partial(_cat_range, self.fs, path)
        return read_range(cipher, fetch, size, start, end, batch)

    def _read_local(self, path: str) -> bytearray:
        """A whole object on a local disk, each segment read straight to where its plaintext
        goes and decrypted there (ObjectCipher.open_from): one buffer and one copy, as a plain
        read. Returned as that bytearray (bytes-like, equal to the bytes a plain read gives):
        a copy into fresh bytes would cost more than the decryption."""
        fd = os.open(_local_path(self.fs, path), os.O_RDONLY)
        try:

            def read_at(offset: int, view: memoryview) -> int:
                return os.preadv(fd, [view], offset)

            size = os.fstat(fd).st_size
            head = bytearray(min(size, HEADER_SIZE))
            del head[read_fully(read_at, 0, memoryview(head)) :]
            header = parse_header(head, path)
            if header is None:
                self._plaintext(path, None)
                blob = bytearray(size)
                del blob[read_fully(read_at, 0, memoryview(blob)) :]  # it may have shrunk
                return blob
            cipher = self.codec.open_cipher(header, path)
            return cipher.open_from(read_at, cipher.layout.plain_size(size, path))
        finally:
            os.close(fd)

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None, **kw):
        path = self._target(path)
        if mode == "wb":
            return EncryptedWriteFile(self, path, **kw)
        if mode != "rb":
            raise ValueError(f"encrypted files open as 'rb' or 'wb', not {mode!r}")
        cipher, size = self.reader(path)
        if cipher is None:
            return self.fs.open(path, "rb", block_size=block_size, **kw)
        return EncryptedReadFile(self, path, cipher, size, block_size, cache_options)

    # --- writing ------------------------------------------------------------------------------

    def pipe_file(self, path, value, **kwargs):
        path = self._target(path)
        if _is_local(self.fs):  # streamed through reused batch buffers, no whole-object one
            EncryptedWriteFile(self, path).close(last=value)
            return
        self._forget(path)
        # One request, or a multipart upload that completes or leaves nothing.
        with sealed_whole(self.codec.new_cipher(path), value) as sealed:
            self.fs.pipe_file(path, sealed, **kwargs)

    def cp_file(self, path1, path2, **kwargs):
        """Decrypts and re-encrypts: the copy has its own identity and data key."""
        with self.open(path1, "rb") as src, self.open(path2, "wb") as dst:
            while chunk := src.read(COPY_CHUNK):
                dst.write(chunk)

    def rm_file(self, path):
        self._forget(self._target(path))
        self.fs.rm_file(self._target(path))

    def rm(self, path, recursive=False, maxdepth=None):
        paths = path if isinstance(path, list) else [path]
        for p in paths:
            self._forget(self._target(p))
        self.fs.rm([self._target(p) for p in paths], recursive=recursive, maxdepth=maxdepth)

    def mkdir(self, path, create_parents=True, **kwargs):
        self.fs.mkdir(self._target(path), create_parents=create_parents, **kwargs)

    def makedirs(self, path, exist_ok=False):
        self.fs.makedirs(self._target(path), exist_ok=exist_ok)

    def rmdir(self, path):
        self.fs.rmdir(self._target(path))

    def invalidate_cache(self, path=None):
        self.fs.invalidate_cache(None if path is None else self._target(path))

    # --- keys ---------------------------------------------------------------------------------

    def rekey(self, path: str, key_id: str | None = None) -> bool:
        """Wrap the object's data key with `key_id` (default: the key its bucket maps to).
        Only the header changes: in place on a local disk, a streamed copy of the same
        ciphertext on an object store. False for a plaintext object or one already there."""
        path = self._target(path)
        size, header = self._header_of(path)
        if header is None:
            return False
        key_id = key_id or self.codec.policy.key_for(path)
        if header.key_id == key_id:
            return False
        new = self.codec.rotate(header, key_id).pack()
        self._forget(path)
        if "file" in _protocols(self.fs):  # in place
            with open(path, "r+b") as out:
                out.write(new)
            return True
        with self.fs.open(path, "rb") as src:
            src.seek(HEADER_SIZE)
            body = [src.read(COPY_CHUNK)]
            with self.fs.open(path + ".rekey-tmp", "wb") as dst:
                dst.write(new)
                while body[0]:
                    dst.write(body[0])
                    body[0] = src.read(COPY_CHUNK)
        self.fs.mv(path + ".rekey-tmp", path)
        return True


def _protocols(fs: fsspec.AbstractFileSystem) -> tuple[str, ...]:
    proto = fs.protocol
    return (proto,) if isinstance(proto, str) else tuple(proto)


def _is_local(fs: fsspec.AbstractFileSystem) -> bool:
    """A local disk, or a directory on one (the gateway's file backend)."""
    return "file" in _protocols(getattr(fs, "fs", None) or fs)


def _local_path(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """The file behind `path` on a local disk, or on a directory of one (the gateway's)."""
    return fs._join(path) if hasattr(fs, "_join") else fs._strip_protocol(path)


def _cat_range(fs: fsspec.AbstractFileSystem, path: str, start: int, end: int) -> bytes:
    return fs.cat_file(path, start=start, end=end)


def _version_tag(info: dict) -> Any:
    for key in ("ETag", "etag", "generation", "mtime", "LastModified", "updated"):
        if key in info:
            return info[key]
    return None


def _resolve(start: int | None, end: int | None, size: int) -> tuple[int, int]:
    """fsspec's range convention: None is an open end, negatives count from the end."""
    start = 0 if start is None else (max(0, size + start) if start < 0 else start)
    end = size if end is None else (max(0, size + end) if end < 0 else min(end, size))
    return start, end


class EncryptedReadFile(AbstractBufferedFile):
    def __init__(self, fs, path, cipher, size, block_size=None, cache_options=None):
        self.cipher = cipher
        super().__init__(
            fs,
            path,
            mode="rb",
            block_size=block_size or 8 * cipher.layout.segment_size,
            cache_type="readahead",
            cache_options=cache_options,
            size=size,
        )

    def _fetch_range(self, start, end):
        return b"".join(self.fs.pieces(self.path, self.cipher, self.size, start, end))


def _umask() -> int:
    """The process's umask, read without setting it (os.umask would race other threads)."""
    with contextlib.suppress(OSError, StopIteration, ValueError):
        with open("/proc/self/status") as status:
            line = next(line for line in status if line.startswith("Umask:"))
        return int(line.split()[1], 8)
    return 0o022


class AtomicWriter:
    """A writer on any fsspec filesystem whose object appears whole on close() and not at all
    after discard(): a local file is written beside its final name and renamed into place (on
    the same filesystem, so never copied), an object store only creates the object when the
    upload completes (and discard aborts it)."""

    def __init__(
        self, fs: fsspec.AbstractFileSystem, path: str, size: int | None = None, **kwargs: Any
    ) -> None:
        self._local = _is_local(fs)
        if self._local:
            self._path = _local_path(fs, path)
            folder, name = os.path.split(self._path)
            os.makedirs(folder, exist_ok=True)
            fd, self._temp = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
            self._file = os.fdopen(fd, "wb")
        elif (s3 := s3io.s3_under(fs)) and not kwargs:  # parts upload while the next fills
            self._file = s3io.S3Upload(s3[0], s3[1](path), size)
        else:
            self._file = fs.open(path, "wb", **kwargs)

    def write(self, data) -> int:
        return self._file.write(data)

    @property
    def in_place(self) -> s3io.S3Upload | None:
        """The upload, when a writer can fill its parts in place (reserve/commit)."""
        return self._file if isinstance(self._file, s3io.S3Upload) else None

    def close(self) -> None:
        self._file.close()
        if self._local:
            os.chmod(self._temp, 0o666 & ~_umask())  # as a plain write would leave it
            os.replace(self._temp, self._path)

    def discard(self) -> None:
        with contextlib.suppress(Exception):
            if self._local:
                self._file.close()
                os.unlink(self._temp)
            elif isinstance(self._file, s3io.S3Upload):
                self._file.discard()
            elif isinstance(self._file, AbstractBufferedFile):
                self._file.discard()
                self._file.closed = True  # so that garbage collection uploads nothing


class EncryptedWriteFile(io.BufferedIOBase):
    """A write-only stream: segments are sealed and handed to the wrapped filesystem's writer
    as they fill (on S3, sealed in place in the upload's part). The object appears whole on
    close; leaving a `with` block by an exception discards it, and an object already at the
    path stays as it was. `size`: the plaintext's size, when known (it only saves memory)."""

    def __init__(
        self, fs: EncryptedFileSystem, path: str, size: int | None = None, **kwargs: Any
    ) -> None:
        super().__init__()
        self.path = self.name = path
        fs._forget(path)
        self.cipher = fs.codec.new_cipher(path)
        stored = None if size is None else self.cipher.layout.cipher_size(size)
        self._target = AtomicWriter(fs.fs, path, stored, **kwargs)
        sink = self._target.in_place
        self._writer: SegmentWriter | InPlaceSegmentWriter = (
            InPlaceSegmentWriter(self.cipher, sink, size)
            if sink is not None
            else SegmentWriter(self.cipher, self._target.write)
        )

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        if self.closed:
            raise ValueError("write to a closed file")
        return self._writer.write(data)

    def tell(self) -> int:
        return self._writer.plain_size

    def close(self, last: bytes | bytearray | memoryview = b"") -> None:
        """Seal what is left, `last` (the final bytes, if given) included, and publish."""
        if self.closed:
            return
        try:
            self._writer.close(last)
            self._target.close()
        except BaseException:
            self._target.discard()
            raise
        finally:
            super().close()

    def discard(self) -> None:
        if not self.closed:
            self._target.discard()
            super().close()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.discard()
        else:
            self.close()
