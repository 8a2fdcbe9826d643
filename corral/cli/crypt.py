"""`corral crypt ...` and `corral crypt-proxy`: encrypted checkpoint storage (docs/crypt.md).

corral.crypt is imported inside each command, so the scheduler's CLI works without the
`corral[crypt]` extra installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from corral.cli import app, fail
from corral.cli.output import JsonOpt, print_json

crypt_app = typer.Typer(
    help="Encrypted checkpoint storage: keys, key rotation, sealed checkpoint steps.",
    no_args_is_help=True,
)
app.add_typer(crypt_app, name="crypt")

KeyringOption = Annotated[
    Path | None,
    typer.Option(help="keyring file (default $CORRAL_CRYPT_KEYRING, else $CORRAL_CRYPT_KEYS)"),
]


def _crypt():
    try:
        import corral.crypt as crypt
    except ImportError as err:
        fail(f"{err.name} is missing: install the extra with pip install 'corral[crypt]'")
    return crypt


def _encrypted_fs(url: str, keyring: Path | None):
    """The encrypted filesystem over the storage `url` names (with or without `encrypted::`),
    and the path within it."""
    import fsspec

    from corral.crypt.format import CryptError
    from corral.crypt.fs import EncryptedFileSystem

    url = url.removeprefix("encrypted::")
    protocol, path = fsspec.core.split_protocol(url)
    try:
        target = fsspec.filesystem(protocol or "file")
        fs = EncryptedFileSystem(fs=target, keyring=str(keyring) if keyring else None)
    except (ImportError, ValueError, CryptError) as err:
        fail(f"{url}: {err}")
    return fs, target._strip_protocol(url)


@crypt_app.command()
def keygen(
    keyring: Annotated[Path, typer.Argument(help="keyring file; made (mode 0600) if absent")],
    key_id: Annotated[str | None, typer.Option("--id", help="the key's id (default key-N)")] = None,
    primary: Annotated[bool, typer.Option(help="new objects use the new key")] = True,
    as_json: JsonOpt = False,
) -> None:
    """Add a new random AES-256 key to a keyring file."""
    crypt = _crypt()
    try:
        made = crypt.add_key(keyring, key_id, primary=primary)
    except crypt.CryptError as err:
        fail(str(err))
    if as_json:
        print_json({"keyring": str(keyring), "key": made, "primary": primary})
        return
    typer.echo(f"{keyring}: added key {made}" + (" (primary)" if primary else ""))


@crypt_app.command()
def rotate(
    urls: Annotated[list[str], typer.Argument(help="objects or directories: s3://bucket/ckpt")],
    keyring: KeyringOption = None,
    to: Annotated[str | None, typer.Option(help="key id (default: each bucket's key)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Re-wrap the data keys of encrypted objects with another key; data is not re-encrypted."""
    crypt = _crypt()
    changed = total = 0
    try:
        for url in urls:
            fs, path = _encrypted_fs(url, keyring)
            paths = fs.find(path) if fs.isdir(path) else [path]
            for p in paths:
                total += 1
                changed += fs.rekey(p, to)
    except (crypt.CryptError, FileNotFoundError) as err:
        fail(str(err))
    if as_json:
        print_json({"rewrapped": changed, "objects": total})
        return
    typer.echo(f"re-wrapped {changed} of {total} objects")


@crypt_app.command()
def seal(
    url: Annotated[str, typer.Argument(help="a checkpoint step's directory")],
    step: Annotated[int | None, typer.Option(help="the step number to record")] = None,
    keyring: KeyringOption = None,
    as_json: JsonOpt = False,
) -> None:
    """Write the step's sealed manifest (do it last, once every object is written)."""
    crypt = _crypt()
    from corral.crypt.manifest import seal_step

    fs, path = _encrypted_fs(url, keyring)
    try:
        manifest = seal_step(fs, path, step)
    except crypt.CryptError as err:
        fail(str(err))
    if as_json:
        print_json(manifest)
        return
    typer.echo(f"{url}: sealed {len(manifest['objects'])} objects")


@crypt_app.command()
def verify(
    url: Annotated[str, typer.Argument(help="a checkpoint step's directory")],
    step: Annotated[int | None, typer.Option(help="the step number it must hold")] = None,
    keyring: KeyringOption = None,
    as_json: JsonOpt = False,
) -> None:
    """Check a step against its manifest: nothing missing, foreign or rewritten."""
    crypt = _crypt()
    from corral.crypt.manifest import verify_step

    fs, path = _encrypted_fs(url, keyring)
    try:
        manifest = verify_step(fs, path, step)
    except crypt.CryptError as err:
        fail(str(err), code=1)
    if as_json:
        print_json(manifest)
        return
    typer.echo(f"{url}: step {manifest['step']}, {len(manifest['objects'])} objects, intact")


@app.command("crypt-proxy")
def crypt_proxy(
    backend: Annotated[
        str,
        typer.Option(help="where objects go: s3://HOST:PORT, s3://HOST:PORT/PREFIX or file:///DIR"),
    ],
    keyring: KeyringOption = None,
    listen: Annotated[str, typer.Option(help="HOST:PORT to serve on")] = "127.0.0.1:9080",
    domain: Annotated[
        str, typer.Option(help="virtual-host addressing: BUCKET.DOMAIN names a bucket")
    ] = "localhost",
    encryption: Annotated[
        bool,
        typer.Option(
            envvar="CORRAL_CRYPT_PROXY_ENCRYPTION",
            help="--no-encryption passes bytes through (a baseline to measure against)",
        ),
    ] = True,
    refuse_plaintext: Annotated[
        bool, typer.Option(help="refuse objects without the format's marker (not migrating)")
    ] = False,
) -> None:
    """An S3 and GCS JSON API gateway that encrypts on the way in and decrypts on the way out.

    Point clients at it: AWS_ENDPOINT_URL=http://LISTEN (boto3, s3fs),
    STORAGE_EMULATOR_HOST=http://LISTEN (gcsfs, google-cloud-storage).
    """
    crypt = _crypt()
    import uvicorn

    from corral.crypt.gateway import Gateway, backend_filesystem, make_app

    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        fail(f"--listen {listen!r}: expected HOST:PORT, e.g. 127.0.0.1:9080")
    try:
        store = backend_filesystem(backend)
        codec = crypt.Codec.from_keyring(keyring) if encryption else None
    except (ValueError, ImportError, crypt.CryptError) as err:
        fail(str(err))
    what = f"encrypting with {codec.provider.source}" if codec else "NOT encrypting"
    typer.echo(f"corral crypt-proxy: http://{listen} -> {backend}, {what}", err=True)
    app_ = make_app(Gateway(store, codec, domain, refuse_plaintext))
    uvicorn.run(
        app_,
        host=host,
        port=int(port),
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=2,
    )
