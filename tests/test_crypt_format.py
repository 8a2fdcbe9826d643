"""The encrypted object format and the `encrypted::` filesystem on a local disk: round trips,
every kind of range, the attacks it must refuse, keys, rotation and the checkpoint manifest."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import fsspec
import pytest

from corral.crypt import CryptError, IntegrityError, UnknownKeyError, add_key
from corral.crypt.codec import Codec
from corral.crypt.format import (
    HEADER_SIZE,
    TAG,
    InPlaceSegmentWriter,
    Layout,
    SegmentReceiver,
    sealed_whole,
)
from corral.crypt.fs import EncryptedFileSystem
from corral.crypt.keys import KeyPolicy, env_keys, load_keyring, parse_bucket_keys
from corral.crypt.manifest import MANIFEST_NAME, seal_step, verify_step

MIB = 1 << 20
CLI = [sys.executable, "-c", "from corral.cli import main; main()"]


@pytest.fixture
def keyring(tmp_path):
    path = tmp_path / "keyring"
    add_key(path, "k1")
    return path


@pytest.fixture
def efs(keyring):
    return EncryptedFileSystem(
        target_protocol="file", keyring=str(keyring), skip_instance_cache=True
    )


SIZES = [0, 1, MIB - 1, MIB, MIB + 1, 3 * MIB, 8 * MIB + 17]


@pytest.mark.parametrize("size", SIZES)
def test_round_trip_through_fsspec_open(keyring, tmp_path, size):
    data = os.urandom(size)
    url = f"encrypted::file://{tmp_path}/obj"
    opts = {"encrypted": {"keyring": str(keyring)}}
    with fsspec.open(url, "wb", **opts) as f:
        f.write(data[: size // 2])
        f.write(data[size // 2 :])
    raw = (tmp_path / "obj").read_bytes()
    assert (
        len(raw) == Layout().cipher_size(size) == HEADER_SIZE + size + TAG * max(1, -(-size // MIB))
    )
    with fsspec.open(url, "rb", **opts) as f:
        assert f.read() == data
    if size >= 64:
        assert data[:64] not in raw  # the ciphertext never holds the plaintext


def test_every_kind_of_range(efs, tmp_path):
    size = 3 * MIB + 5
    data = os.urandom(size)
    path = str(tmp_path / "obj")
    efs.pipe_file(path, data)
    cases = [
        (0, 1),
        (0, size),
        (MIB - 1, MIB + 1),  # across a segment boundary
        (MIB, 2 * MIB),  # exactly one segment
        (size - 1, size),
        (5, None),
        (None, 7),
        (-10, None),  # suffix
        (-10, -3),
        (size, size + 10),  # past the end
        (2 * MIB + 3, size + 100),
    ]
    for start, end in cases:
        assert efs.cat_file(path, start, end) == data[start:end], (start, end)
    with efs.open(path) as f:
        f.seek(MIB - 3)
        assert f.read(6) == data[MIB - 3 : MIB + 3]
        f.seek(-4, 2)
        assert f.read() == data[-4:]
    assert efs.info(path)["size"] == size
    assert [e["size"] for e in efs.ls(str(tmp_path)) if e["name"] == path] == [size]


def _write(efs, path, data):
    efs.pipe_file(str(path), data)
    return bytearray(path.read_bytes())


def test_tampering_truncation_reordering_swapping_are_refused(efs, tmp_path):
    data = os.urandom(3 * MIB)
    a, b = tmp_path / "a", tmp_path / "b"
    raw = _write(efs, a, data)
    _write(efs, b, os.urandom(3 * MIB))
    stride = MIB + TAG

    def refused(blob, match, path=a):
        path.write_bytes(bytes(blob))
        with pytest.raises(IntegrityError, match=match):
            efs.cat_file(str(path))

    flipped = bytearray(raw)
    flipped[HEADER_SIZE + MIB + 100] ^= 1
    refused(flipped, "segment 1 of 3 fails authentication")
    refused(raw[:-1], "segment 2 of 3")  # one byte short
    refused(raw[: HEADER_SIZE + 2 * stride], "segment 1 of 2")  # cut at a segment boundary
    refused(raw[: HEADER_SIZE + 5], "truncated")
    reordered = bytearray(raw)
    first, second = (
        slice(HEADER_SIZE, HEADER_SIZE + stride),
        slice(HEADER_SIZE + stride, HEADER_SIZE + 2 * stride),
    )
    reordered[first], reordered[second] = raw[second], raw[first]
    refused(reordered, "segment 0 of 3")
    refused(raw, "not this object", path=b)  # a's bytes at b's name: swapped
    header = bytearray(raw)
    header[10] ^= 1  # the nonce prefix, authenticated by the key wrap
    a.write_bytes(bytes(header))
    with pytest.raises(CryptError, match="wrong key|header was altered"):
        efs.cat_file(str(a))


def test_wrong_key_and_unknown_key(efs, tmp_path):
    path = tmp_path / "obj"
    efs.pipe_file(str(path), b"secret weights")
    other = tmp_path / "other-ring"
    add_key(other, "k1")  # same id, different key material
    wrong = EncryptedFileSystem(
        target_protocol="file", keyring=str(other), skip_instance_cache=True
    )
    with pytest.raises(CryptError, match="does not unwrap under key 'k1'.*wrong key"):
        wrong.cat_file(str(path))
    stranger = tmp_path / "stranger"
    add_key(stranger, "k9")
    nokey = EncryptedFileSystem(
        target_protocol="file", keyring=str(stranger), skip_instance_cache=True
    )
    with pytest.raises(UnknownKeyError, match="key 'k1' is not in keyring .* holds k9"):
        nokey.cat_file(str(path))


def test_plaintext_objects_still_read(efs, tmp_path):
    (tmp_path / "old.txt").write_bytes(b"written before encryption")
    assert efs.cat_file(str(tmp_path / "old.txt"), 8, 14) == b"before"
    assert efs.info(str(tmp_path / "old.txt"))["size"] == 25
    with efs.open(str(tmp_path / "old.txt")) as f:
        assert f.read() == b"written before encryption"
    strict = EncryptedFileSystem(fs=efs.fs, codec=efs.codec, refuse_plaintext=True)
    with pytest.raises(IntegrityError, match="not encrypted"):
        strict.cat_file(str(tmp_path / "old.txt"))
    with pytest.raises(IntegrityError, match="not encrypted"):
        strict.cat_file(str(tmp_path / "old.txt"), 0, 5)


def test_failed_write_leaves_no_object(efs, tmp_path):
    path = tmp_path / "ckpt"
    efs.pipe_file(str(path), b"good")
    with pytest.raises(RuntimeError), efs.open(str(path), "wb") as f:
        f.write(b"half")
        raise RuntimeError("training crashed")
    assert efs.cat_file(str(path)) == b"good"


def test_copy_and_move_re_encrypt(efs, tmp_path):
    data = os.urandom(MIB + 3)
    efs.pipe_file(str(tmp_path / "a"), data)
    efs.mv(str(tmp_path / "a"), str(tmp_path / "b"))
    assert efs.cat_file(str(tmp_path / "b")) == data
    assert not (tmp_path / "a").exists()


def test_keyring_file_mode_and_env_provider(tmp_path, monkeypatch):
    ring = tmp_path / "ring"
    result = subprocess.run([*CLI, "crypt", "keygen", str(ring), "--id", "team"], text=True)
    assert result.returncode == 0
    assert ring.stat().st_mode & 0o777 == 0o600
    assert json.loads(ring.read_text())["primary"] == "team"
    ring.chmod(0o644)
    with pytest.raises(CryptError, match="readable by others.*chmod 600"):
        load_keyring(ring)
    again = subprocess.run(
        [*CLI, "crypt", "keygen", str(ring)], capture_output=True, text=True, check=False
    )
    assert again.returncode == 2 and "chmod 600" in again.stderr
    assert "Traceback" not in again.stderr
    keys = env_keys("a:" + "A" * 43 + "=,b:" + "B" * 43 + "=")
    assert keys.primary == "a" and keys.ids() == ["a", "b"]
    with pytest.raises(CryptError, match="is not ID:BASE64KEY"):
        env_keys("nocolon")


def test_bucket_key_mapping(tmp_path, monkeypatch):
    kms = "projects/p/locations/global/keyRings/proxy/cryptoKeys/proxy-kek"
    assert parse_bucket_keys(f"ckpt:{kms},*:k2", "x") == {"ckpt": kms, "*": "k2"}
    ring = tmp_path / "ring"
    for key_id in ("k1", kms, "k3"):
        add_key(ring, key_id, primary=key_id == "k1")
    monkeypatch.setenv("GCP_KMS_BUCKET_KEY_MAPPING", f"ckpt:{kms}")
    monkeypatch.setenv("CORRAL_CRYPT_BUCKET_KEYS", "logs:k3")
    policy = KeyPolicy(load_keyring(ring))
    assert policy.key_for("ckpt/step/x") == kms
    assert policy.key_for("logs/x") == "k3"
    assert policy.key_for("other/x") == "k1"
    monkeypatch.setenv("CORRAL_CRYPT_BUCKET_KEYS", "logs:nope")
    with pytest.raises(UnknownKeyError, match="bucket 'logs' is mapped to key 'nope'"):
        KeyPolicy(load_keyring(ring))


def test_rotation_rewraps_without_rewriting_data(keyring, tmp_path):
    efs = EncryptedFileSystem(
        target_protocol="file", keyring=str(keyring), skip_instance_cache=True
    )
    data = os.urandom(2 * MIB + 1)
    path = tmp_path / "obj"
    efs.pipe_file(str(path), data)
    before = path.read_bytes()
    add_key(keyring, "k2")
    result = subprocess.run(
        [*CLI, "crypt", "rotate", str(tmp_path), "--keyring", str(keyring), "--to", "k2"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    after = path.read_bytes()
    assert after[HEADER_SIZE:] == before[HEADER_SIZE:]  # the segments are untouched
    assert b"k2" in after[:HEADER_SIZE]
    only_k2 = tmp_path / "only-k2"
    ring = json.loads(keyring.read_text())
    ring["keys"].pop("k1")
    only_k2.write_text(json.dumps(ring))
    only_k2.chmod(0o600)
    fresh = EncryptedFileSystem(
        target_protocol="file", keyring=str(only_k2), skip_instance_cache=True
    )
    assert fresh.cat_file(str(path)) == data


def test_manifest_detects_missing_mixed_and_rolled_back_objects(efs, tmp_path):
    step = tmp_path / "step_100"
    for name in ("model.pt", "optim/0", "optim/1"):
        efs.pipe_file(str(step / name), os.urandom(1000))
    old = (step / "optim/1").read_bytes()
    efs.pipe_file(str(step / "optim/1"), os.urandom(1000))  # the step's final version
    seal_step(efs, str(step), step=100)
    assert verify_step(efs, str(step), step=100)["step"] == 100
    assert MANIFEST_NAME not in verify_step(efs, str(step))["objects"]

    (step / "optim/1").write_bytes(old)  # rolled back to an older write
    with pytest.raises(IntegrityError, match="rewritten since the step was sealed.* optim/1"):
        verify_step(efs, str(step))
    (step / "optim/1").unlink()
    with pytest.raises(IntegrityError, match="missing optim/1"):
        verify_step(efs, str(step))
    efs.pipe_file(str(step / "optim/1"), os.urandom(1000))
    with pytest.raises(IntegrityError, match="rewritten"):
        verify_step(efs, str(step))
    efs.pipe_file(str(step / "stray"), b"from step 99")
    with pytest.raises(IntegrityError, match="not part of the sealed step.* stray"):
        verify_step(efs, str(step))
    with pytest.raises(IntegrityError, match="sealed as step 100, not step 7"):
        verify_step(efs, str(step), step=7)
    with pytest.raises(IntegrityError, match="never sealed"):
        verify_step(efs, str(tmp_path / "step_200"))
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    os.rename(step / MANIFEST_NAME, moved / MANIFEST_NAME)  # another step's manifest
    with pytest.raises(IntegrityError, match="not this object"):
        verify_step(efs, str(moved))


@pytest.mark.parametrize("size", SIZES)
def test_decrypting_as_pieces_arrive(keyring, size):
    """A body taken in as it arrives (SegmentReceiver), then decrypted in place: pieces of
    any size, a tag split across them, batches of segments; a flipped byte is refused."""
    codec = Codec.from_keyring(str(keyring))
    cipher = codec.new_cipher("bucket/obj")
    data = os.urandom(size)
    with sealed_whole(cipher, data) as sealed:
        body = bytes(sealed[HEADER_SIZE:])
    pieces = itertools.cycle([1, 15, 17, 65521, MIB + 3, 3 * MIB])  # boundaries fall anywhere
    opener, got, at = SegmentReceiver(cipher, 0, size), bytearray(), 0
    for lo in range(0, max(size, 1), 2 * MIB):  # batches of two segments
        length = min(size - lo, 2 * MIB)
        out = bytearray(length + TAG)
        opener.start(memoryview(out))
        while not opener.full:
            chunk = body[at : at + next(pieces)]
            at += len(chunk) - len(opener.feed(chunk))
        opener.open()
        got += out[:length]
    assert got == data and at == len(body)
    flipped = bytearray(body)
    flipped[len(body) // 2] ^= 1
    opener = SegmentReceiver(cipher, 0, size)
    opener.start(memoryview(bytearray(size + TAG)))
    opener.feed(flipped)
    with pytest.raises(IntegrityError, match="fails authentication"):
        opener.open()


class _Sink:
    """A sink for InPlaceSegmentWriter that moves to a fresh buffer now and then, as an
    upload sends a part."""

    def __init__(self, part: int) -> None:
        self.parts: list[bytearray] = [bytearray(part)]
        self.fill = 0
        self.part = part

    def reserve(self, n: int) -> memoryview:
        if len(self.parts[-1]) - self.fill < n:
            del self.parts[-1][self.fill :]
            self.parts.append(bytearray(max(n, self.part)))
            self.fill = 0
        return memoryview(self.parts[-1])[self.fill : self.fill + n]

    def commit(self, n: int) -> None:
        self.fill += n

    def data(self) -> bytes:
        return b"".join(bytes(p) for p in self.parts[:-1]) + bytes(self.parts[-1][: self.fill])


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("said", ["exact", "none", "short", "long"])
def test_sealing_in_place(keyring, size, said):
    """Segments sealed where the sink keeps them (InPlaceSegmentWriter) make the same
    ciphertext as sealing the whole object at once, whether the size it was told is right,
    missing, too small or too large, written in pieces of any size."""
    codec = Codec.from_keyring(str(keyring))
    cipher = codec.new_cipher("bucket/obj")
    data = os.urandom(size)
    told = {"exact": size, "none": None, "short": size // 2, "long": size + 3 * MIB + 5}[said]
    sink = _Sink(5 * MIB + 7)
    writer = InPlaceSegmentWriter(cipher, sink, told)
    pieces, at = itertools.cycle([1, 15, MIB - 1, 17, 3 * MIB, 65521]), 0
    while at < size:
        n = next(pieces)
        writer.write(data[at : at + n])
        at += n
    writer.close()
    with sealed_whole(cipher, data) as sealed:
        assert sink.data() == bytes(sealed)
    assert writer.plain_size == size


def test_read_buffers_are_reused_only_once_no_view_is_left():
    """Reads hand on views of their buffers (a transport may still be sending one): a buffer
    is handed out again only after every view of it is gone, never while one could see it
    change."""
    from corral.crypt.format import _Buffers

    pool = _Buffers()
    first = pool.get(MIB + TAG)
    piece = memoryview(first)[5:MIB]
    pool.give(first)
    second = pool.get(MIB + TAG)
    assert second is not first  # `piece` still sees it
    second[:] = b"\xff" * len(second)
    assert not any(piece[:100])
    piece.release()
    assert pool.get(MIB + TAG) is first
    assert len(first) == MIB + TAG  # the check that it is free leaves its size as it was
    pool.give(second)
    assert pool.get(MIB) is not second  # only a buffer of the size asked for
