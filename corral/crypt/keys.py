"""Key-encryption keys (KEKs): where they come from, and which one a bucket uses.

A KEK never touches data: it wraps each object's random data key (AES-256-GCM, the header as
associated data). Providers:

- a keyring file (the default): JSON `{"format": "corral-crypt-keyring/1", "primary": ID,
  "keys": {ID: base64 key, ...}}`, mode 0600, made by `corral crypt keygen`;
- the environment: `CORRAL_CRYPT_KEYS=ID:BASE64[,ID:BASE64...]` (the first is the primary).

A cloud KMS fits the same interface (`KeyProvider`): wrap and unwrap by key id.
Which key new objects get: `CORRAL_CRYPT_BUCKET_KEYS=bucket:key-id,...` (the go-gcsproxy
`GCP_KMS_BUCKET_KEY_MAPPING` value, `bucket:projects/.../cryptoKeys/name,...`, is read too;
`*` names the default), else the provider's primary key.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from corral.crypt.format import KEY_ID_MAX, CryptError, UnknownKeyError

KEYRING_FORMAT = "corral-crypt-keyring/1"
KEYRING_ENV = "CORRAL_CRYPT_KEYRING"
KEYS_ENV = "CORRAL_CRYPT_KEYS"
BUCKET_KEYS_ENV = "CORRAL_CRYPT_BUCKET_KEYS"
GCS_PROXY_MAPPING_ENV = "GCP_KMS_BUCKET_KEY_MAPPING"


class KeyProvider(Protocol):
    primary: str

    def ids(self) -> list[str]: ...

    def wrap(self, key_id: str, data_key: bytes, aad: bytes) -> bytes: ...

    def unwrap(self, key_id: str, wrapped: bytes, aad: bytes) -> bytes: ...


class StaticKeys:
    """KEKs held in memory: what the keyring file and the environment provider load into."""

    def __init__(self, keys: Mapping[str, bytes], primary: str, source: str) -> None:
        if primary not in keys:
            raise CryptError(f"{source}: the primary key {primary!r} is not among its keys")
        for key_id, key in keys.items():
            check_key_id(key_id, source)
            if len(key) != 32:
                raise CryptError(f"{source}: key {key_id!r} is {len(key)} bytes; AES-256 needs 32")
        self._keys = dict(keys)
        self.primary = primary
        self.source = source

    def ids(self) -> list[str]:
        return list(self._keys)

    def _kek(self, key_id: str) -> AESGCM:
        key = self._keys.get(key_id)
        if key is None:
            raise UnknownKeyError(
                f"key {key_id!r} is not in {self.source} (it holds {', '.join(sorted(self._keys))})"
            )
        return AESGCM(key)

    def wrap(self, key_id: str, data_key: bytes, aad: bytes) -> bytes:
        nonce = os.urandom(12)
        return nonce + self._kek(key_id).encrypt(nonce, data_key, aad)

    def unwrap(self, key_id: str, wrapped: bytes, aad: bytes) -> bytes:
        kek = self._kek(key_id)
        try:
            return kek.decrypt(wrapped[:12], wrapped[12:], aad)
        except InvalidTag:
            raise CryptError(
                f"the data key does not unwrap under key {key_id!r} of {self.source}: that key"
                " differs from the writer's (wrong key), or the object's header was altered"
            ) from None


def check_key_id(key_id: str, source: str) -> None:
    if not key_id or len(key_id.encode()) > KEY_ID_MAX or any(c in key_id for c in ",\n\0"):
        raise CryptError(
            f"{source}: key id {key_id!r} must be 1 to {KEY_ID_MAX} bytes without ',' or newlines"
        )


def _b64key(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise CryptError(f"{what} is not base64") from None


def load_keyring(path: str | Path) -> StaticKeys:
    path = Path(path)
    try:
        mode = path.stat().st_mode
        text = path.read_text()
    except OSError as err:
        raise CryptError(f"keyring {path}: {err.strerror or err}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CryptError(
            f"keyring {path} is readable by others (mode {stat.S_IMODE(mode):o}): chmod 600 it"
        )
    try:
        data = json.loads(text)
    except ValueError:
        raise CryptError(f"keyring {path} is not JSON") from None
    if not isinstance(data, dict) or data.get("format") != KEYRING_FORMAT:
        raise CryptError(f"keyring {path}: not a {KEYRING_FORMAT} file")
    keys = data.get("keys")
    if not isinstance(keys, dict) or not keys or not isinstance(data.get("primary"), str):
        raise CryptError(f"keyring {path}: needs 'keys' (id -> base64 key) and 'primary'")
    decoded = {str(k): _b64key(str(v), f"keyring {path}: key {k!r}") for k, v in keys.items()}
    return StaticKeys(decoded, data["primary"], f"keyring {path}")


def add_key(path: str | Path, key_id: str | None = None, primary: bool = True) -> str:
    """Add a new random key to the keyring at `path` (created, mode 0600, if absent); it
    becomes the primary unless told otherwise. Returns its id."""
    path = Path(path)
    if path.exists():
        ring = load_keyring(path)
        data = json.loads(path.read_text())
    else:
        ring, data = None, {"format": KEYRING_FORMAT, "primary": "", "keys": {}}
    if key_id is None:
        key_id = f"key-{len(data['keys']) + 1}"
        while key_id in data["keys"]:
            key_id += "x"
    check_key_id(key_id, f"keyring {path}")
    if ring is not None and key_id in ring.ids():
        raise CryptError(f"keyring {path} already holds a key {key_id!r}")
    data["keys"][key_id] = base64.b64encode(AESGCM.generate_key(256)).decode()
    if primary or not data["primary"]:
        data["primary"] = key_id
    _write_private(path, json.dumps(data, indent=2) + "\n")
    return key_id


def _write_private(path: Path, text: str) -> None:
    """Write atomically, and never readable by anyone else, not even for a moment."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mkstemp: mode 0600
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def env_keys(value: str) -> StaticKeys:
    keys: dict[str, bytes] = {}
    for item in value.split(","):
        key_id, sep, b64 = item.strip().rpartition(":")
        if not sep:
            raise CryptError(f"{KEYS_ENV}: {item!r} is not ID:BASE64KEY")
        keys[key_id] = _b64key(b64, f"{KEYS_ENV}: key {key_id!r}")
    return StaticKeys(keys, next(iter(keys)), KEYS_ENV)


def default_provider(keyring: str | Path | None = None) -> StaticKeys:
    """The keyring given, else $CORRAL_CRYPT_KEYRING, else $CORRAL_CRYPT_KEYS."""
    keyring = keyring or os.environ.get(KEYRING_ENV)
    if keyring:
        return load_keyring(keyring)
    if os.environ.get(KEYS_ENV):
        return env_keys(os.environ[KEYS_ENV])
    raise CryptError(
        f"no keys: give a keyring (--keyring, or ${KEYRING_ENV}; `corral crypt keygen` makes"
        f" one) or set ${KEYS_ENV}=ID:BASE64KEY"
    )


def parse_bucket_keys(value: str, source: str) -> dict[str, str]:
    """`bucket:key-id,...` (the key id may itself hold ':' and '/', as a KMS name does)."""
    mapping: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        bucket, sep, key_id = item.partition(":")
        if not sep or not bucket or not key_id:
            raise CryptError(f"{source}: {item!r} is not bucket:key-id ('*' for any bucket)")
        mapping[bucket] = key_id
    return mapping


def bucket_keys_from_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for name in (GCS_PROXY_MAPPING_ENV, BUCKET_KEYS_ENV):  # ours wins where both name a bucket
        if environ.get(name):
            mapping |= parse_bucket_keys(environ[name], name)
    return mapping


class KeyPolicy:
    """Which KEK wraps a new object's data key, and the provider that holds them all."""

    def __init__(self, provider: KeyProvider, bucket_keys: Mapping[str, str] | None = None):
        self.provider = provider
        self.bucket_keys = dict(bucket_keys_from_env() if bucket_keys is None else bucket_keys)
        held = set(provider.ids())
        for bucket, key_id in self.bucket_keys.items():
            if key_id not in held:
                raise UnknownKeyError(
                    f"bucket {bucket!r} is mapped to key {key_id!r}, which the key provider does"
                    f" not hold (it holds {', '.join(sorted(held))})"
                )

    def key_for(self, identity: str) -> str:
        bucket = identity.lstrip("/").split("/", 1)[0]
        return self.bucket_keys.get(bucket) or self.bucket_keys.get("*") or self.provider.primary
