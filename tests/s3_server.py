"""A real S3-compatible endpoint on 127.0.0.1 for the object-storage tests: moto's standalone server."""

from __future__ import annotations

import socket
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str
    access_key: str
    secret_key: str
    region: str = "eu-west-1"  # not us-east-1: s3fs would send it as an (invalid) LocationConstraint

    @property
    def env(self) -> dict[str, str]:
        """The standard AWS variables botocore (under s3fs) reads."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_DEFAULT_REGION": self.region,
        }

    def fs(self):
        """An s3fs filesystem with these credentials, fresh (not fsspec's cached instance)."""
        import s3fs

        return s3fs.S3FileSystem(
            key=self.access_key,
            secret=self.secret_key,
            skip_instance_cache=True,
            client_kwargs={"endpoint_url": self.endpoint_url, "region_name": self.region},
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    """moto's server in a thread of this process, on a free loopback port; stopped after the module."""
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    # moto keeps its buckets per process, not per server: start every module from an empty store
    urllib.request.urlopen(
        urllib.request.Request(f"http://127.0.0.1:{port}/moto-api/reset", method="POST"), timeout=30
    ).close()
    try:
        # a distinctive secret, so a leak anywhere is found by a plain substring search
        yield S3Server(
            endpoint_url=f"http://127.0.0.1:{port}",
            access_key=f"AKID{uuid.uuid4().hex[:12].upper()}",
            secret_key=f"s3cr3t-{uuid.uuid4().hex}",
        )
    finally:
        server.stop()
