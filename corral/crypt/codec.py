"""Ties the format to the keys: a cipher for a new object, or for one already written."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

from corral.crypt.format import Header, ObjectCipher, new_header, rewrap
from corral.crypt.keys import KeyPolicy, KeyProvider, default_provider


class Codec:
    def __init__(self, policy: KeyPolicy) -> None:
        self.policy = policy

    @classmethod
    def from_keyring(cls, keyring: str | Path | None = None, bucket_keys=None) -> Codec:
        return cls(KeyPolicy(default_provider(keyring), bucket_keys))

    @property
    def provider(self) -> KeyProvider:
        return self.policy.provider

    def new_cipher(self, identity: str) -> ObjectCipher:
        key_id = self.policy.key_for(identity)
        header, data_key = new_header(key_id, lambda key, aad: self.provider.wrap(key_id, key, aad))
        return ObjectCipher(header, data_key, identity)

    def data_key(self, header: Header) -> bytes:
        return self.provider.unwrap(header.key_id, header.wrapped_key, header.authenticated_part())

    def open_cipher(self, header: Header, identity: str) -> ObjectCipher:
        return ObjectCipher(header, self.data_key(header), identity)

    def rotate(self, header: Header, key_id: str) -> Header:
        """The same data key, wrapped by `key_id` instead: no data is re-encrypted."""
        data_key = self.data_key(header)
        draft = Header(key_id, header.nonce_prefix, header.wrapped_key, header.segment_log2)
        return rewrap(draft, data_key, lambda key, aad: self.provider.wrap(key_id, key, aad))

    def fingerprint(self, header: Header) -> str:
        """Names one write of one object (its data key and nonce prefix), the same under any
        KEK, revealing nothing of the key: what the checkpoint manifest records."""
        mac = hmac.new(self.data_key(header), b"corral-crypt/fingerprint", hashlib.sha256)
        return (header.nonce_prefix + mac.digest()[:16]).hex()
