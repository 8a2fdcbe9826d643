"""Encrypted storage against a real S3 server (SeaweedFS on 127.0.0.1) with real clients:
boto3 and s3fs through the `corral crypt-proxy` gateway, `encrypted::s3://` straight to the
server, and gcsfs through the gateway's GCS JSON API."""

from __future__ import annotations

import io
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import fsspec
import httpx
import pytest
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import ClientError, ResponseStreamingError
from crypt_servers import CREDENTIALS, gateway, seaweedfs

from corral.crypt import IntegrityError, add_key
from corral.crypt.format import HEADER_SIZE, MAGIC

pytestmark = pytest.mark.live

MIB = 1 << 20
BUCKET = "ckpt"


def s3_client(url: str, read_timeout: float = 60):
    return boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        config=Config(
            retries={"max_attempts": 1}, s3={"addressing_style": "path"}, read_timeout=read_timeout
        ),
    )


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """SeaweedFS, and two gateways in front of it: one with our keyring, one with another
    keyring holding a key of the same id (a wrong key)."""
    work = tmp_path_factory.mktemp("crypt-live")
    keyring, wrong = work / "keyring", work / "wrong-keyring"
    add_key(keyring, "k1")
    add_key(wrong, "k1")
    env = {**os.environ, **CREDENTIALS, "AWS_REGION": "us-east-1"}
    with seaweedfs(work) as s3_url:
        s3_client(s3_url).create_bucket(Bucket=BUCKET)
        backend = "s3://" + s3_url.removeprefix("http://")
        with (
            gateway(work, backend, keyring, env) as (gw, gw_pid),
            gateway(work, backend, wrong, env) as (wrong_gw, _),
        ):
            yield {
                "s3": s3_url,
                "gw": gw,
                "gw_pid": gw_pid,
                "wrong_gw": wrong_gw,
                "keyring": keyring,
            }


@pytest.fixture(scope="module")
def raw(servers):
    return s3_client(servers["s3"])


@pytest.fixture(scope="module")
def gw(servers):
    return s3_client(servers["gw"])


def test_round_trips_and_ciphertext_never_holds_plaintext(gw, raw):
    for size in (0, 1, MIB - 1, MIB, MIB + 1, 2 * MIB):
        data = os.urandom(size)
        key = f"sizes/{size}"
        gw.put_object(Bucket=BUCKET, Key=key, Body=data)
        assert gw.get_object(Bucket=BUCKET, Key=key)["Body"].read() == data
        assert gw.head_object(Bucket=BUCKET, Key=key)["ContentLength"] == size
        stored = raw.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        assert stored.startswith(MAGIC) and len(stored) > HEADER_SIZE + size
        if size >= 32:
            assert data[:32] not in stored and data[-32:] not in stored
    text = b"the weights of layer 7 " * 1000
    gw.put_object(Bucket=BUCKET, Key="sizes/text", Body=text)
    assert b"layer 7" not in raw.get_object(Bucket=BUCKET, Key="sizes/text")["Body"].read()


def test_every_kind_of_range(gw):
    size = 3 * MIB + 7
    data = os.urandom(size)
    gw.put_object(Bucket=BUCKET, Key="ranges/obj", Body=data)
    cases = {
        "bytes=0-0": (0, 1),
        "bytes=0-99": (0, 100),
        f"bytes={MIB - 2}-{MIB + 1}": (MIB - 2, MIB + 2),  # across a segment boundary
        f"bytes={MIB}-{2 * MIB - 1}": (MIB, 2 * MIB),
        f"bytes={size - 1}-": (size - 1, size),
        "bytes=5-": (5, size),
        "bytes=-10": (size - 10, size),  # suffix
        f"bytes=-{size + 50}": (0, size),  # suffix longer than the object
        f"bytes={size - 5}-{size + 100}": (size - 5, size),  # end past the object
    }
    for header, (start, end) in cases.items():
        got = gw.get_object(Bucket=BUCKET, Key="ranges/obj", Range=header)
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206, header
        assert got["ContentRange"] == f"bytes {start}-{end - 1}/{size}", header
        assert got["Body"].read() == data[start:end], header
    whole = gw.get_object(Bucket=BUCKET, Key="ranges/obj", Range="bytes=9-3")  # ignored
    assert whole["ResponseMetadata"]["HTTPStatusCode"] == 200
    for bad in (f"bytes={size}-", "bytes=-0"):
        with pytest.raises(ClientError) as err:
            gw.get_object(Bucket=BUCKET, Key="ranges/obj", Range=bad)
        assert err.value.response["Error"]["Code"] == "InvalidRange"
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 416
    gw.put_object(Bucket=BUCKET, Key="ranges/empty", Body=b"")
    with pytest.raises(ClientError, match="InvalidRange"):
        gw.get_object(Bucket=BUCKET, Key="ranges/empty", Range="bytes=-1")


def test_listing_copy_delete_and_virtual_host_addressing(servers, gw):
    for name in ("a", "b", "c", "dir/x", "dir/y", "dir/sub/z"):
        gw.put_object(Bucket=BUCKET, Key=f"list/{name}", Body=name[-1].encode() * 100)
    page = gw.list_objects_v2(Bucket=BUCKET, Prefix="list/", Delimiter="/", MaxKeys=2)
    assert [o["Key"] for o in page["Contents"]] == ["list/a", "list/b"]
    assert page["IsTruncated"]
    token = page["NextContinuationToken"]
    rest = gw.list_objects_v2(Bucket=BUCKET, Prefix="list/", Delimiter="/", ContinuationToken=token)
    assert [o["Key"] for o in rest["Contents"]] == ["list/c"]
    assert [p["Prefix"] for p in rest["CommonPrefixes"]] == ["list/dir/"]
    everything = gw.list_objects_v2(Bucket=BUCKET, Prefix="list/dir/")
    assert {o["Key"]: o["Size"] for o in everything["Contents"]} == {
        "list/dir/sub/z": 100,
        "list/dir/x": 100,
        "list/dir/y": 100,
    }  # plaintext sizes
    gw.copy_object(Bucket=BUCKET, Key="list/copy", CopySource={"Bucket": BUCKET, "Key": "list/a"})
    assert gw.get_object(Bucket=BUCKET, Key="list/copy")["Body"].read() == b"a" * 100
    gw.delete_object(Bucket=BUCKET, Key="list/copy")
    gw.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": "list/b"}, {"Key": "list/c"}]})
    left = gw.list_objects_v2(Bucket=BUCKET, Prefix="list/", Delimiter="/")
    assert [o["Key"] for o in left["Contents"]] == ["list/a"]
    with pytest.raises(ClientError, match="NoSuchKey|404"):
        gw.head_object(Bucket=BUCKET, Key="list/b")
    # Virtual-host style: the bucket is the first label of the Host header.
    port = servers["gw"].rsplit(":", 1)[1]
    got = httpx.get(f"{servers['gw']}/list/a", headers={"Host": f"{BUCKET}.localhost:{port}"})
    assert got.status_code == 200 and got.content == b"a" * 100


def test_multipart_upload(gw, raw):
    data = os.urandom(11 * MIB + 3)
    config = TransferConfig(multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB)
    gw.upload_fileobj(io.BytesIO(data), BUCKET, "mpu/obj", Config=config)
    assert gw.get_object(Bucket=BUCKET, Key="mpu/obj")["Body"].read() == data
    assert gw.get_object(Bucket=BUCKET, Key="mpu/obj", Range="bytes=-3")["Body"].read() == data[-3:]
    assert data[:64] not in raw.get_object(Bucket=BUCKET, Key="mpu/obj")["Body"].read()
    aborted = gw.create_multipart_upload(Bucket=BUCKET, Key="mpu/aborted")["UploadId"]
    gw.upload_part(Bucket=BUCKET, Key="mpu/aborted", UploadId=aborted, PartNumber=1, Body=b"x")
    gw.abort_multipart_upload(Bucket=BUCKET, Key="mpu/aborted", UploadId=aborted)
    keys = [o["Key"] for o in raw.list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert not [k for k in keys if "aborted" in k or k.startswith(".corral-uploads/")]


def test_a_long_multipart_complete_keeps_the_client_waiting_not_timing_out(servers, gw):
    # Joining re-encrypts every part: here longer than the client's 1 s read timeout, which
    # failed the call before (and its retry found the parts gone). S3's answer: white space
    # until the result.
    part, n = os.urandom(5 * MIB), 40
    up = gw.create_multipart_upload(Bucket=BUCKET, Key="mpu/long")["UploadId"]
    parts = [
        {
            "PartNumber": i,
            "ETag": gw.upload_part(
                Bucket=BUCKET, Key="mpu/long", UploadId=up, PartNumber=i, Body=part
            )["ETag"],
        }
        for i in range(1, n + 1)
    ]
    impatient = s3_client(servers["gw"], read_timeout=1)
    impatient.complete_multipart_upload(
        Bucket=BUCKET, Key="mpu/long", UploadId=up, MultipartUpload={"Parts": parts}
    )
    assert gw.head_object(Bucket=BUCKET, Key="mpu/long")["ContentLength"] == n * len(part)
    tail = gw.get_object(Bucket=BUCKET, Key="mpu/long", Range="bytes=-16")["Body"].read()
    assert tail == part[-16:]
    # An upload that is gone is still refused with its status, before any white space.
    with pytest.raises(ClientError) as err:
        impatient.complete_multipart_upload(
            Bucket=BUCKET, Key="mpu/long", UploadId=up, MultipartUpload={"Parts": parts}
        )
    assert err.value.response["Error"]["Code"] == "InvalidPart"


def _refused(client, key: str, code: str, words: str):
    with pytest.raises(ClientError) as err:
        client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    assert err.value.response["Error"]["Code"] == code
    assert words in err.value.response["Error"]["Message"]


def test_tamper_truncation_reorder_swap_and_wrong_key_are_refused(servers, gw, raw):
    data = os.urandom(3 * MIB)
    gw.put_object(Bucket=BUCKET, Key="attack/a", Body=data)
    gw.put_object(Bucket=BUCKET, Key="attack/b", Body=os.urandom(3 * MIB))
    stored = raw.get_object(Bucket=BUCKET, Key="attack/a")["Body"].read()
    stride = MIB + 16

    def planted(blob: bytes, key: str = "attack/a") -> str:
        raw.put_object(Bucket=BUCKET, Key=key, Body=blob)
        return key

    flipped = bytearray(stored)
    flipped[HEADER_SIZE + 5] ^= 0x40
    _refused(gw, planted(bytes(flipped)), "CorralIntegrityError", "segment 0 of 3")
    _refused(gw, planted(stored[:-100]), "CorralIntegrityError", "segment 2 of 3")
    _refused(gw, planted(stored[: HEADER_SIZE + 2 * stride]), "CorralIntegrityError", "segment 1")
    swapped = (
        stored[:HEADER_SIZE]
        + stored[HEADER_SIZE + stride : HEADER_SIZE + 2 * stride]
        + stored[HEADER_SIZE : HEADER_SIZE + stride]
        + stored[HEADER_SIZE + 2 * stride :]
    )
    _refused(gw, planted(swapped), "CorralIntegrityError", "segment 0 of 3")
    _refused(gw, planted(stored, "attack/b"), "CorralIntegrityError", "not this object")
    planted(stored)
    assert gw.get_object(Bucket=BUCKET, Key="attack/a")["Body"].read() == data
    _refused(s3_client(servers["wrong_gw"]), "attack/a", "CorralKeyError", "wrong key")


def test_reads_that_decrypt_as_the_body_arrives_refuse_every_attack(servers, gw, raw):
    """A whole read through `encrypted::s3://` is one GET decrypted as it arrives, and so is
    a gateway GET of many batches: what was altered is refused, never returned."""
    direct = {"endpoint_url": servers["s3"], **_s3fs_credentials()}
    enc, _ = fsspec.core.url_to_fs(
        f"encrypted::s3://{BUCKET}", encrypted={"keyring": str(servers["keyring"])}, s3=direct
    )
    data = os.urandom(3 * MIB)
    enc.pipe_file(f"{BUCKET}/stream/a", data)
    stored = raw.get_object(Bucket=BUCKET, Key="stream/a")["Body"].read()
    stride = MIB + 16

    def refused(blob: bytes, match: str) -> None:
        raw.put_object(Bucket=BUCKET, Key="stream/a", Body=blob)
        with pytest.raises(IntegrityError, match=match):
            enc.cat_file(f"{BUCKET}/stream/a")

    flipped = bytearray(stored)
    flipped[HEADER_SIZE + stride + 7] ^= 1
    refused(bytes(flipped), "segment 1 of 3 fails")
    refused(stored[:-1], "segment 2 of 3 fails")
    refused(stored[: HEADER_SIZE + 2 * stride], "segment 1 of 2 fails")  # cut at a boundary
    refused(stored + b"x", "truncated")
    later = stored[HEADER_SIZE + stride : HEADER_SIZE + 2 * stride]
    refused(stored[:HEADER_SIZE] + later + stored[HEADER_SIZE + stride :], "segment 0 of 3")
    raw.put_object(Bucket=BUCKET, Key="stream/a", Body=stored)
    assert enc.cat_file(f"{BUCKET}/stream/a") == data

    # Through the gateway: 20 segments, 3 batches; damage in the third cuts the body short.
    big = os.urandom(20 * MIB)
    gw.put_object(Bucket=BUCKET, Key="stream/big", Body=big)
    assert gw.get_object(Bucket=BUCKET, Key="stream/big")["Body"].read() == big
    span = gw.get_object(Bucket=BUCKET, Key="stream/big", Range=f"bytes={MIB - 3}-{17 * MIB}")
    assert span["Body"].read() == big[MIB - 3 : 17 * MIB + 1]
    damaged = bytearray(raw.get_object(Bucket=BUCKET, Key="stream/big")["Body"].read())
    damaged[HEADER_SIZE + 18 * stride + 5] ^= 1
    raw.put_object(Bucket=BUCKET, Key="stream/big", Body=bytes(damaged))
    body = gw.get_object(Bucket=BUCKET, Key="stream/big")["Body"]
    with pytest.raises(ResponseStreamingError):
        body.read()


def test_uploads_of_many_parts_appear_whole_or_not_at_all(servers, raw):
    """`encrypted::s3://` uploads parts while the next fills: the object appears on close,
    and a write abandoned part-way leaves no object and no upload behind."""
    direct = {"endpoint_url": servers["s3"], **_s3fs_credentials()}
    enc, _ = fsspec.core.url_to_fs(
        f"encrypted::s3://{BUCKET}", encrypted={"keyring": str(servers["keyring"])}, s3=direct
    )
    data = os.urandom(40 * MIB + 3)
    with enc.open(f"{BUCKET}/parts/obj", "wb") as f:
        for at in range(0, len(data), 3 * MIB):
            f.write(data[at : at + 3 * MIB])
    assert enc.cat_file(f"{BUCKET}/parts/obj") == data
    with pytest.raises(RuntimeError), enc.open(f"{BUCKET}/parts/died", "wb") as f:
        f.write(data)
        raise RuntimeError("the job died")
    assert not enc.exists(f"{BUCKET}/parts/died")
    assert not raw.list_multipart_uploads(Bucket=BUCKET).get("Uploads")


def test_plaintext_objects_still_read(gw, raw):
    raw.put_object(Bucket=BUCKET, Key="legacy/notes.txt", Body=b"written before the gateway")
    assert gw.get_object(Bucket=BUCKET, Key="legacy/notes.txt")["Body"].read().startswith(b"writ")
    got = gw.get_object(Bucket=BUCKET, Key="legacy/notes.txt", Range="bytes=-7")
    assert got["Body"].read() == b"gateway"


def test_s3fs_through_the_gateway_and_encrypted_fsspec_direct(servers, raw):
    opts = {"endpoint_url": servers["gw"], **_s3fs_credentials()}
    fs = fsspec.filesystem("s3", skip_instance_cache=True, use_listings_cache=False, **opts)
    data = os.urandom(2 * MIB + 9)
    with fs.open(f"{BUCKET}/s3fs/model.pt", "wb") as f:
        f.write(data)
    assert fs.cat_file(f"{BUCKET}/s3fs/model.pt") == data
    assert (
        fs.cat_file(f"{BUCKET}/s3fs/model.pt", start=MIB - 1, end=MIB + 1)
        == data[MIB - 1 : MIB + 1]
    )
    assert fs.info(f"{BUCKET}/s3fs/model.pt")["size"] == len(data)
    # encrypted:: straight to the server reads what the gateway wrote (same identity, key)
    direct = {"endpoint_url": servers["s3"], **_s3fs_credentials()}
    url = f"encrypted::s3://{BUCKET}/s3fs/model.pt"
    enc = {"keyring": str(servers["keyring"]), "skip_instance_cache": True}
    with fsspec.open(url, "rb", encrypted=enc, s3=direct) as f:
        f.seek(MIB)
        assert f.read(100) == data[MIB : MIB + 100]
    with fsspec.open(f"encrypted::s3://{BUCKET}/s3fs/direct", "wb", encrypted=enc, s3=direct) as f:
        f.write(b"x" * 5000)
    assert fs.cat_file(f"{BUCKET}/s3fs/direct") == b"x" * 5000
    assert b"xxxx" not in raw.get_object(Bucket=BUCKET, Key="s3fs/direct")["Body"].read()
    fs.rm(f"{BUCKET}/s3fs", recursive=True)
    assert not fs.exists(f"{BUCKET}/s3fs/model.pt")


def _s3fs_credentials() -> dict:
    return {"key": CREDENTIALS["AWS_ACCESS_KEY_ID"], "secret": CREDENTIALS["AWS_SECRET_ACCESS_KEY"]}


def test_gcsfs_through_the_gateway(servers, raw, monkeypatch):
    # The plain client: gcsfs's experimental one (GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT, on by
    # default) first asks a gRPC control API about each bucket, which no emulator serves.
    from gcsfs.core import GCSFileSystem

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", servers["gw"])  # as crypt_proxy: sets it
    fs = GCSFileSystem(token="anon", skip_instance_cache=True, project="test")
    small, large = os.urandom(1000), os.urandom(7 * MIB + 11)
    fs.pipe_file(f"{BUCKET}/gcs/small", small)  # one multipart/related request
    with fs.open(f"{BUCKET}/gcs/large", "wb", block_size=5 * MIB) as f:  # resumable, 2 chunks
        f.write(large)
    assert fs.cat_file(f"{BUCKET}/gcs/small") == small
    assert fs.cat_file(f"{BUCKET}/gcs/large") == large
    assert (
        fs.cat_file(f"{BUCKET}/gcs/large", start=MIB - 3, end=MIB + 3) == large[MIB - 3 : MIB + 3]
    )
    assert {e["name"]: e["size"] for e in fs.ls(f"{BUCKET}/gcs", detail=True)} == {
        f"{BUCKET}/gcs/large": len(large),
        f"{BUCKET}/gcs/small": 1000,
    }
    assert small[:64] not in raw.get_object(Bucket=BUCKET, Key="gcs/small")["Body"].read()
    fs.rm_file(f"{BUCKET}/gcs/small")
    assert not fs.exists(f"{BUCKET}/gcs/small")


def test_multi_gib_object_streams_through_in_bounded_memory(servers, gw, tmp_path):
    """A sparse 2 GiB + 5 byte file goes up through the gateway and comes back in ranges."""
    size = (2 << 30) + 5
    sparse = tmp_path / "sparse"
    with open(sparse, "wb") as f:
        f.truncate(size)
        f.seek(size - 5)
        f.write(b"tail!")
    with open(sparse, "rb") as f:
        gw.put_object(Bucket=BUCKET, Key="big/obj", Body=f)
    assert gw.head_object(Bucket=BUCKET, Key="big/obj")["ContentLength"] == size
    assert gw.get_object(Bucket=BUCKET, Key="big/obj", Range="bytes=-5")["Body"].read() == b"tail!"
    middle = gw.get_object(Bucket=BUCKET, Key="big/obj", Range="bytes=1073741820-1073741831")
    assert middle["Body"].read() == bytes(12)
    gw.delete_object(Bucket=BUCKET, Key="big/obj")
    status = Path(f"/proc/{servers['gw_pid']}/status").read_text()
    peak = int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])
    assert peak < 400 * 1024, f"the gateway peaked at {peak} KiB for a 2 GiB object"


def test_encrypted_fsspec_refuses_a_swapped_object_on_s3(servers, raw):
    direct = {"endpoint_url": servers["s3"], **_s3fs_credentials()}
    enc = {"keyring": str(servers["keyring"]), "skip_instance_cache": True}
    for name in ("one", "two"):
        url = f"encrypted::s3://{BUCKET}/swap/{name}"
        with fsspec.open(url, "wb", encrypted=enc, s3=direct) as f:
            f.write(name.encode() * 1000)
    one = raw.get_object(Bucket=BUCKET, Key="swap/one")["Body"].read()
    raw.put_object(Bucket=BUCKET, Key="swap/two", Body=one)
    with (
        pytest.raises(IntegrityError, match="not this object"),
        fsspec.open(f"encrypted::s3://{BUCKET}/swap/two", "rb", encrypted=enc, s3=direct) as f,
    ):
        f.read()


def test_rotation_on_s3_rewraps_and_keeps_the_segments(servers, raw, tmp_path):
    ring = tmp_path / "ring"
    add_key(ring, "old")
    direct = {"endpoint_url": servers["s3"], **_s3fs_credentials()}
    url = f"encrypted::s3://{BUCKET}/rotate/obj"
    data = os.urandom(MIB + 7)
    with fsspec.open(url, "wb", encrypted={"keyring": str(ring)}, s3=direct) as f:
        f.write(data)
    before = raw.get_object(Bucket=BUCKET, Key="rotate/obj")["Body"].read()
    add_key(ring, "new")
    fresh = {"keyring": str(ring), "skip_instance_cache": True}  # the keyring as it is now
    fs, path = fsspec.core.url_to_fs(url, encrypted=fresh, s3=direct)
    assert fs.rekey(path, "new")
    after = raw.get_object(Bucket=BUCKET, Key="rotate/obj")["Body"].read()
    assert after[HEADER_SIZE:] == before[HEADER_SIZE:]  # the segments, byte for byte
    assert after[:HEADER_SIZE] != before[:HEADER_SIZE]
    ring_data = json.loads(ring.read_text())
    del ring_data["keys"]["old"]
    ring.write_text(json.dumps(ring_data))
    with fsspec.open(url, "rb", encrypted=fresh, s3=direct) as f:  # the old key is gone
        assert f.read() == data


def test_names_that_would_climb_out_of_a_bucket_are_refused(servers):
    # Encoded, so that the client sends them as they are rather than resolving the dots.
    for path in ("/ckpt/%2E%2E/other/x", "/ckpt/a/%2E/b", "/%2E%2E/etc/passwd", "/Bad_Bucket!/x"):
        got = httpx.get(servers["gw"] + path)
        assert got.status_code == 400, (path, got.status_code)
        assert b"<Code>Invalid" in got.content
    gcs = httpx.get(servers["gw"] + "/storage/v1/b/ckpt/o/a%2F..%2F..%2Fx?alt=media")
    assert gcs.status_code == 400 and "segments" in gcs.json()["error"]["message"]


def test_concurrent_reads_never_see_a_reused_buffer_change(servers, gw, raw):
    """Reads decrypt into buffers that are reused once nothing holds a view of them: many
    gateway GETs of same-sized objects at once, and pieces of `encrypted::s3://` reads kept
    while more reads run, all come back exactly as written."""
    objects = {f"reuse/{i}": os.urandom(3 * MIB + 5) for i in range(12)}
    for key, data in objects.items():
        gw.put_object(Bucket=BUCKET, Key=key, Body=data)
    for _ in range(2):
        with ThreadPoolExecutor(8) as pool:
            got = dict(
                zip(
                    objects,
                    pool.map(lambda k: gw.get_object(Bucket=BUCKET, Key=k)["Body"].read(), objects),
                    strict=True,
                )
            )
        assert got == objects

    direct = {"endpoint_url": servers["s3"], **_s3fs_credentials()}
    enc, _ = fsspec.core.url_to_fs(
        f"encrypted::s3://{BUCKET}", encrypted={"keyring": str(servers["keyring"])}, s3=direct
    )
    data = os.urandom(20 * MIB)
    enc.pipe_file(f"{BUCKET}/reuse/held", data)
    cipher, size = enc.reader(f"{BUCKET}/reuse/held")
    held = list(enc.pieces(f"{BUCKET}/reuse/held", cipher, size, 0, size, batch=8))
    for _ in range(3):
        assert enc.cat_file(f"{BUCKET}/reuse/held", start=1, end=19 * MIB) == data[1 : 19 * MIB]
    assert b"".join(held) == data


def test_a_fresh_gateway_reads_an_object_in_as_many_backend_requests_as_a_plain_one(
    servers, gw, raw, monkeypatch
):
    """A gateway started after the write (a job's restore) has not seen the object's header:
    its info and header come from one ranged GET, then the body from one GET, as a plain
    gateway's HEAD and GET. An object it has seen costs a HEAD (its version) and the GET."""
    import anyio

    from corral.crypt.codec import Codec
    from corral.crypt.gateway import Gateway, backend_filesystem

    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    data = os.urandom(3 * MIB + 1)
    gw.put_object(Bucket=BUCKET, Key="fresh/a", Body=data)
    gw.put_object(Bucket=BUCKET, Key="fresh/empty", Body=b"")

    def requests_per_read(gateway: Gateway, key: str) -> tuple[list[str], bytes]:
        calls: list[str] = []
        s3 = gateway.raw
        call = s3._call_s3

        async def counted(method, *args, **kwargs):
            calls.append(method)
            return await call(method, *args, **kwargs)

        monkeypatch.setattr(s3, "_call_s3", counted)
        info = anyio.run(gateway.info, f"{BUCKET}/{key}")
        got = b"".join(gateway.pieces(f"{BUCKET}/{key}", info, 0, info["size"]))
        monkeypatch.setattr(s3, "_call_s3", call)
        return calls, got

    backend = "s3://" + servers["s3"].removeprefix("http://")
    fresh = Gateway(backend_filesystem(backend), Codec.from_keyring(servers["keyring"]))
    assert requests_per_read(fresh, "fresh/a") == (["get_object", "get_object"], data)
    assert requests_per_read(fresh, "fresh/a") == (["head_object", "get_object"], data)
    calls, got = requests_per_read(fresh, "fresh/empty")
    assert got == b"" and calls[-1] != "head_object"
    plain = Gateway(backend_filesystem(backend), None)
    raw.put_object(Bucket=BUCKET, Key="fresh/plain", Body=data)
    assert requests_per_read(plain, "fresh/plain") == (["head_object", "get_object"], data)
