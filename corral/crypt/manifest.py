"""The checkpoint manifest: written last, sealed, and checked before a restore trusts a step.

A step directory is sealed by writing `_CORRAL_MANIFEST` into it once every object is written:
an encrypted JSON document (so bound to that directory's path, and authenticated) listing each
object's plaintext size and digest. For an encrypted object the digest is its write's
fingerprint (codec.fingerprint: the nonce prefix and a MAC by its data key, so reading headers
suffices and a key rotation changes nothing); for a plaintext object, the SHA-256 of its bytes.
`verify_step` then refuses a step with an object missing, an object not of this step (a mixed
step), or an object rewritten since (a rollback to an older version, or a newer write).
"""

from __future__ import annotations

import hashlib
import json
import time

from corral.crypt.format import IntegrityError
from corral.crypt.fs import EncryptedFileSystem

MANIFEST_NAME = "_CORRAL_MANIFEST"
MANIFEST_FORMAT = "corral-crypt-manifest/1"


def _objects(fs: EncryptedFileSystem, directory: str) -> dict[str, dict]:
    directory = fs._target(directory).rstrip("/")
    found = fs.find(directory, detail=True)
    out = {}
    for path, info in sorted(found.items()):
        name = path[len(directory) + 1 :]
        if info.get("type") != "file" or name == MANIFEST_NAME:
            continue
        _, header = fs._header_of(path)
        if header is None:
            digest = "sha256:" + hashlib.sha256(fs.cat_file(path)).hexdigest()
        else:
            digest = fs.codec.fingerprint(header)
        out[name] = {"size": info["size"], "digest": digest}
    return out


def seal_step(fs: EncryptedFileSystem, directory: str, step: int | None = None) -> dict:
    """Write the manifest of every object now under `directory`; returns it."""
    manifest = {
        "format": MANIFEST_FORMAT,
        "step": step,
        "sealed_at": time.time(),
        "objects": _objects(fs, directory),
    }
    path = fs._target(directory).rstrip("/") + "/" + MANIFEST_NAME
    fs.pipe_file(path, json.dumps(manifest, sort_keys=True).encode())
    return manifest


def verify_step(fs: EncryptedFileSystem, directory: str, step: int | None = None) -> dict:
    """The manifest, if the objects under `directory` are exactly those it sealed; otherwise
    IntegrityError naming what is missing, foreign or rewritten."""
    where = fs._target(directory).rstrip("/")
    try:
        manifest = json.loads(fs.cat_file(where + "/" + MANIFEST_NAME))
    except FileNotFoundError:
        raise IntegrityError(
            f"{where}: no {MANIFEST_NAME}: the step was never sealed (cut short while writing?)"
        ) from None
    if manifest.get("format") != MANIFEST_FORMAT:
        raise IntegrityError(f"{where}: {MANIFEST_NAME} is not a {MANIFEST_FORMAT} document")
    if step is not None and manifest.get("step") != step:
        raise IntegrityError(f"{where}: sealed as step {manifest.get('step')}, not step {step}")
    sealed, now = manifest["objects"], _objects(fs, directory)
    problems = []
    if missing := sorted(set(sealed) - set(now)):
        problems.append("missing " + ", ".join(missing))
    if foreign := sorted(set(now) - set(sealed)):
        problems.append("not part of the sealed step (a mixed step?) " + ", ".join(foreign))
    if changed := sorted(n for n in set(sealed) & set(now) if sealed[n] != now[n]):
        problems.append(
            "rewritten since the step was sealed (rolled back, or another step's) "
            + ", ".join(changed)
        )
    if problems:
        raise IntegrityError(f"{where}: " + "; ".join(problems))
    return manifest
