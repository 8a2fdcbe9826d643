"""Encrypted checkpoint storage (DESIGN.md §7, docs/crypt.md): a segmented AEAD format, key
providers, an fsspec filesystem (`encrypted::`), a sealed checkpoint manifest and a gateway
speaking the S3 and GCS JSON API subsets. Independent of the scheduler: nothing here imports it.
"""

from corral.crypt.codec import Codec
from corral.crypt.format import CryptError, IntegrityError, UnknownKeyError
from corral.crypt.keys import KeyPolicy, StaticKeys, add_key, default_provider, load_keyring

__all__ = [
    "Codec",
    "CryptError",
    "IntegrityError",
    "KeyPolicy",
    "StaticKeys",
    "UnknownKeyError",
    "add_key",
    "default_provider",
    "load_keyring",
]
