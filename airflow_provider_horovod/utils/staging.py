"""
Cluster deploy mode's staging directory: where the Airflow side leaves the payload, the runtime and the driver
program for a driver that runs on a Spark worker, and where that driver writes back ``status.json``,
``result.json`` and ``result.pkl``.

Two kinds, the same files and the same calls:

- **a filesystem the workers share**: a path or ``file://`` URI (NFS, a cluster filesystem, one machine);
- **object storage**: an fsspec URI (``s3://bucket/prefix``), an Airflow ``ObjectStoragePath``, or Airflow's
  ``s3://conn_id@bucket/prefix`` form. No shared filesystem is needed: the worker fetches the driver program through
  a presigned HTTP(S) URL (Spark's own file fetch; no Hadoop S3 connector needed on the cluster), and the driver
  reads the payload and the runtime and writes its results with fsspec, with the connection's credentials as
  ``AWS_*`` environment variables of the driver (never Spark properties or command-line arguments).
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.runtime.artifacts import is_remote
from airflow_provider_horovod.utils.storage import credentials_env, storage_location

SIGNED_URL_EXPIRY_S = 7 * 24 * 3600
"""Lifetime of the driver program's presigned URL, seconds: S3's maximum, so a driver queued for days still starts."""


def _is_local(uri: str) -> bool:
    return not is_remote(uri)


def with_conn_id(uri: str, conn_id: str | None) -> str:
    """``scheme://conn_id@bucket/path`` (Airflow's form) for an object-store URI and a connection id, else ``uri``."""
    if not conn_id or _is_local(uri):
        return uri
    parsed = urlparse(uri)
    return urlunparse(parsed._replace(netloc=f"{conn_id}@{parsed.netloc}"))


def fs_options(env: dict[str, str]) -> dict[str, Any]:
    """
    s3fs options for the credentials of :func:`~airflow_provider_horovod.utils.storage.credentials_env`.

    :param env: ``AWS_*`` variables (may be empty: the options are empty and botocore's own lookup applies).
    """
    options: dict[str, Any] = {}
    for name, option in (
        ("AWS_ACCESS_KEY_ID", "key"),
        ("AWS_SECRET_ACCESS_KEY", "secret"),
        ("AWS_SESSION_TOKEN", "token"),
        ("AWS_ENDPOINT_URL", "endpoint_url"),
    ):
        if env.get(name):
            options[option] = env[name]
    if env.get("AWS_DEFAULT_REGION"):
        options["client_kwargs"] = {"region_name": env["AWS_DEFAULT_REGION"]}
    return options


class Staging:
    """
    One try's staging directory, on a shared filesystem or on object storage.

    Construction does no I/O: the filesystem and the connection are resolved on first use.

    :param location: an absolute path, a ``file://`` URI, an fsspec URI, an ``ObjectStoragePath``, or
        ``scheme://conn_id@bucket/prefix``; a relative path is made absolute (the driver runs in another directory).
    """

    def __init__(self, location: Any) -> None:
        uri, self.conn_id = storage_location(location)
        if _is_local(uri):
            parsed = urlparse(uri)
            uri = str(Path(parsed.path if parsed.scheme else uri).absolute())
        self.uri = uri.rstrip("/") if not _is_local(uri) else uri
        """The location as the driver opens it (a path, or a URI without the connection id)."""

    @classmethod
    def of(cls, location: Any) -> Staging:
        """``location`` itself when it already is a :class:`Staging`, else a new one."""
        return location if isinstance(location, Staging) else cls(location)

    def __repr__(self) -> str:
        return f"Staging({self.record!r})"

    @property
    def is_local(self) -> bool:
        """A path on a filesystem the workers share (``False``: object storage)."""
        return _is_local(self.uri)

    @property
    def record(self) -> str:
        """The location with its connection id, to persist (task state store, trigger) and rebuild from."""
        return with_conn_id(self.uri, self.conn_id)

    @property
    def parent(self) -> Staging:
        """The directory that holds this try's and the other tries' staging directories."""
        if self.is_local:
            return Staging(str(Path(self.uri).parent))
        return Staging(with_conn_id(self.uri.rsplit("/", 1)[0], self.conn_id))

    def path(self, name: str) -> str:
        """The path or URI of file ``name`` in this directory."""
        return os.path.join(self.uri, name) if self.is_local else f"{self.uri}/{name}"

    @cached_property
    def credentials(self) -> dict[str, str]:
        """The connection's credentials as ``AWS_*`` variables (empty without a connection id or when local)."""
        return credentials_env(self.conn_id) if self.conn_id and not self.is_local else {}

    @cached_property
    def fs(self) -> Any:
        """The fsspec filesystem (object storage only)."""
        import fsspec

        protocol = urlparse(self.uri).scheme
        try:
            return fsspec.filesystem(protocol, **(fs_options(self.credentials) if protocol in ("s3", "s3a") else {}))
        except (ImportError, ValueError) as err:
            raise HorovodJobError(
                f"staging location {self.uri!r}: cannot open {protocol}:// storage: {err} "
                "(install the fsspec implementation, e.g. s3fs, on the Airflow worker and the "
                "Spark workers)"
            ) from err

    def _key(self, name: str) -> str:
        return self.path(name).split("://", 1)[1]

    def create(self) -> None:
        """Create the directory (owner-only on a filesystem; a no-op on object storage, which has no directories)."""
        if self.is_local:
            Path(self.uri).mkdir(parents=True, exist_ok=True, mode=0o700)

    def write_bytes(self, name: str, data: bytes) -> None:
        """Write file ``name`` (owner-only on a filesystem)."""
        if self.is_local:
            fd = os.open(self.path(name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        else:
            self.fs.pipe_file(self._key(name), data)

    def read_bytes(self, name: str) -> bytes | None:
        """File ``name``'s content, ``None`` when it does not exist (yet)."""
        try:
            if self.is_local:
                return Path(self.path(name)).read_bytes()
            return self.fs.cat_file(self._key(name))
        except FileNotFoundError:
            return None

    def siblings_with(self, name: str) -> list[Staging]:
        """The other tries' staging directories (same parent) that hold file ``name``, sorted."""
        if self.is_local:
            local = sorted(str(p.parent) for p in Path(self.parent.uri).glob(f"*/{name}"))
            return [Staging(d) for d in local if d != self.uri]
        self.fs.invalidate_cache()
        keys = sorted(self.fs.glob(f"{self.parent._key_dir()}/*/{name}"))
        scheme = urlparse(self.uri).scheme
        remote = [f"{scheme}://{k.rsplit('/', 1)[0]}" for k in keys]
        return [Staging(with_conn_id(d, self.conn_id)) for d in remote if d != self.uri]

    def _key_dir(self) -> str:
        return self.uri.split("://", 1)[1]

    def signed_url(self, name: str, expires_s: int = SIGNED_URL_EXPIRY_S) -> str:
        """
        A presigned HTTP(S) URL that reads file ``name`` (object storage only): how a Spark worker fetches the
        driver program without the store's credentials or a Hadoop connector for it.

        :raises HorovodJobError: the store cannot presign URLs, or this is a filesystem path (nothing to presign).
        """
        if self.is_local:
            raise HorovodJobError(f"staging location {self.uri!r} is a filesystem path: there is no URL to presign")
        try:
            return self.fs.sign(self._key(name), expiration=expires_s)
        except NotImplementedError as err:
            raise HorovodJobError(
                f"staging location {self.uri!r}: its storage cannot presign URLs, which cluster deploy mode needs to "
                "hand the driver program to a Spark worker; use an S3-compatible store or a shared filesystem"
            ) from err

    def remove(self) -> None:
        """Delete the directory and everything in it (errors ignored)."""
        import shutil

        if self.is_local:
            shutil.rmtree(self.uri, ignore_errors=True)
            return
        try:
            self.fs.rm(self._key_dir(), recursive=True)
        except (FileNotFoundError, OSError):
            pass
