"""S3-compatible object storage for sealed segments: the one module that talks to it.

Rules of this file:
- The S3 client is pyarrow's (`pyarrow.fs.S3FileSystem`, the AWS SDK for C++ inside
  pyarrow, already a dependency): uploads, ranged reads, listings. DuckDB reads the same
  objects through `duckdb_filesystem` (fsspec's wrapper of that pyarrow filesystem,
  registered on the connection), because DuckDB's own S3 reader, the httpfs extension,
  is downloaded from the internet at first use (see README, Object storage).
- A location is a string: a local path, or ``s3://bucket/key``. `is_remote` tells them
  apart; `arrow_input`, `read_bytes` and `stat` take either, so readers need no branch.
- Where the endpoint is: ``--endpoint-url`` when shipping (recorded in the data dir's
  ship index, `ingest.log.ship`), else env ``HOOKAUDIT_S3_ENDPOINT`` (then
  ``AWS_ENDPOINT_URL``); none means AWS itself. Credentials are never stored nor taken on
  argv: the AWS SDK's usual chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``,
  ``AWS_PROFILE`` and the shared credentials file, instance roles); region from
  ``AWS_REGION`` (default us-east-1).
- Errors of the client become `engine.errors.Unavailable` naming the object, at the calls.

Example:
    >>> is_remote("s3://logs/hookaudit/sealed/w1/00000001.parquet"), is_remote("/d/x")
    (True, False)
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from engine.errors import Unavailable

__all__ = [
    "ENDPOINT_ENV",
    "Store",
    "arrow_input",
    "duckdb_filesystem",
    "is_remote",
    "open_store",
    "read_bytes",
    "set_endpoint",
    "split_url",
    "stat",
]

ENDPOINT_ENV = "HOOKAUDIT_S3_ENDPOINT"
_lock = threading.Lock()
_filesystems: dict[tuple[str, str], Any] = {}  # (endpoint, region) -> S3FileSystem
_endpoints: dict[str, str] = {}  # bucket -> endpoint recorded when shipping


def is_remote(location: str) -> bool:
    """Whether a location is an object (``s3://``) rather than a local path."""
    return location.startswith("s3://")


def split_url(url: str) -> tuple[str, str]:
    """(bucket, key or prefix without slashes at either end) of an ``s3://`` URL.

    Example:
        >>> split_url("s3://logs/prod/hookaudit/")
        ('logs', 'prod/hookaudit')
    """
    try:
        parts = urlsplit(url)
    except ValueError as e:
        raise ValueError(f"{url!r}: {e}") from e
    if parts.scheme != "s3" or not parts.netloc:
        raise ValueError(f"{url!r}: expected s3://BUCKET[/PREFIX]")
    if parts.query or parts.fragment:
        raise ValueError(f"{url!r}: no query or fragment in an s3:// URL")
    prefix = parts.path.strip("/")
    if any(c < " " or c == "\x7f" for c in url):
        raise ValueError(f"{url!r}: control characters in an s3:// URL")
    if prefix and any(seg in ("", ".", "..") for seg in prefix.split("/")):
        # a key is no path, but readers that treat it as one (DuckDB's globs, a bucket
        # mounted as files) would see another place than the ship recorded
        raise ValueError(f"{url!r}: the prefix has an empty, '.' or '..' segment")
    return parts.netloc, prefix


def _endpoint_for(bucket: str, endpoint: str | None) -> str:
    return (
        endpoint
        or _endpoints.get(bucket)
        or os.environ.get(ENDPOINT_ENV)
        or os.environ.get("AWS_ENDPOINT_URL")
        or ""
    )


def set_endpoint(bucket: str, endpoint: str) -> None:
    """Use `endpoint` for `bucket` unless env or a caller names another (the ship index's)."""
    if endpoint and not os.environ.get(ENDPOINT_ENV):
        _endpoints.setdefault(bucket, endpoint)


def _filesystem(bucket: str, endpoint: str | None = None) -> Any:
    import pyarrow.fs as pafs

    where = _endpoint_for(bucket, endpoint)
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    with _lock:
        fs = _filesystems.get((where, region))
        if fs is None:
            kw: dict[str, Any] = {"region": region, "connect_timeout": 5, "request_timeout": 30}
            if where:
                try:
                    u = urlsplit(where)
                except ValueError as e:
                    raise ValueError(f"S3 endpoint {where!r}: {e}") from e
                if u.scheme not in ("http", "https") or not u.netloc:
                    raise ValueError(f"S3 endpoint {where!r}: expected http(s)://HOST[:PORT]")
                kw.update(endpoint_override=u.netloc, scheme=u.scheme)
            fs = pafs.S3FileSystem(**kw)
            _filesystems[(where, region)] = fs
    return fs


@dataclass(frozen=True)
class Store:
    """A bucket and prefix to ship to, with its client.

    Example:
        >>> open_store("s3://logs/hookaudit").url_of("sealed/w1/00000001.parquet")
        's3://logs/hookaudit/sealed/w1/00000001.parquet'
    """

    bucket: str
    prefix: str
    endpoint: str
    fs: Any

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def url_of(self, rel: str) -> str:
        return f"{self.url}/{rel}"

    def put(self, rel: str, data: bytes) -> None:
        """Upload one object (a single PUT or a multipart upload, as the SDK chooses)."""
        key = f"{self.bucket}/{self.prefix}/{rel}" if self.prefix else f"{self.bucket}/{rel}"
        try:
            with self.fs.open_output_stream(key, metadata={"Content-Type": _ctype(rel)}) as f:
                f.write(data)
        except OSError as exc:
            raise Unavailable(f"{self.url_of(rel)}: upload failed: {_one_line(exc)}") from exc


def _ctype(rel: str) -> str:
    return "application/x-ndjson" if rel.endswith(".jsonl") else "application/octet-stream"


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def open_store(url: str, *, endpoint: str | None = None) -> Store:
    """The store of ``s3://bucket/prefix`` (its bucket must exist); ValueError for a bad URL."""
    bucket, prefix = split_url(url)
    where = _endpoint_for(bucket, endpoint)
    if where:
        _endpoints[bucket] = where  # what this process reads back from that bucket
    return Store(bucket, prefix, where, _filesystem(bucket, where))


def _key(location: str) -> tuple[Any, str]:
    bucket, key = split_url(location)
    return _filesystem(bucket), f"{bucket}/{key}"


def arrow_input(location: str) -> Any:
    """What pyarrow opens: the path itself, or a random-access file over the object."""
    if not is_remote(location):
        return location
    fs, key = _key(location)
    try:
        return fs.open_input_file(key)
    except OSError as exc:
        raise Unavailable(f"{location}: cannot open: {_one_line(exc)}") from exc


def read_bytes(location: str) -> bytes:
    """Every byte of a file or an object (FileNotFoundError when absent)."""
    if not is_remote(location):
        with open(location, "rb") as f:
            return f.read()
    fs, key = _key(location)
    try:
        with fs.open_input_stream(key) as f:
            return bytes(f.read())
    except FileNotFoundError:
        raise
    except OSError as exc:
        if "NoSuchKey" in str(exc) or "does not exist" in str(exc):
            raise FileNotFoundError(location) from exc
        raise Unavailable(f"{location}: cannot read: {_one_line(exc)}") from exc


def stat(location: str) -> tuple[int, int] | None:
    """(size, mtime in ns) of a file or an object; None when it does not exist."""
    if not is_remote(location):
        try:
            st = os.stat(location)
        except FileNotFoundError:
            return None
        return st.st_size, st.st_mtime_ns
    import pyarrow.fs as pafs

    fs, key = _key(location)
    try:
        info = fs.get_file_info(key)
    except OSError as exc:
        raise Unavailable(f"{location}: cannot stat: {_one_line(exc)}") from exc
    if info.type != pafs.FileType.File:
        return None
    return int(info.size), int(info.mtime_ns or 0)


def duckdb_filesystem(locations: list[str]) -> Any:
    """An fsspec filesystem (protocol ``s3``) for DuckDB's `register_filesystem`, over the
    pyarrow client of these objects; None when none is remote. All must share an endpoint."""
    remote = [loc for loc in locations if is_remote(loc)]
    if not remote:
        return None
    from fsspec.implementations.arrow import ArrowFSWrapper  # type: ignore[import-untyped]

    filesystems = {id(_key(loc)[0]): _key(loc)[0] for loc in remote}
    if len(filesystems) > 1:
        raise Unavailable("shipped segments on more than one S3 endpoint: not supported")

    class _S3(ArrowFSWrapper):  # type: ignore[misc]
        protocol = ("s3",)

    return _S3(next(iter(filesystems.values())))
