"""An object store on S3 (or any S3-compatible endpoint) through boto3's transfer manager."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
from boto3.exceptions import Boto3Error
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from loraplex.adapters.errors import ObjectMissing, StoreUnavailable
from loraplex.adapters.store.base import (
    CHUNK_BYTES,
    StoredObject,
    sha256_of_file,
    validate_delete_prefix,
    validate_key,
    validate_prefix,
    verify_download,
)

SHA256_METADATA = "sha256"
# A missing bucket is not a missing object: it is a misconfigured (unavailable) store.
MISSING_CODES = frozenset({"404", "NoSuchKey", "NotFound"})


class S3Store:
    """Objects in one bucket. Timeouts are short and retries few, so an outage shows fast."""

    def __init__(
        self,
        bucket: str,
        endpoint_url: str | None = None,
        region: str = "us-east-1",
        access_key: str | None = None,
        secret_key: str | None = None,
        create_bucket: bool = False,
        *,
        connect_timeout_s: float = 2.0,
        read_timeout_s: float = 10.0,
        max_attempts: int = 2,
        multipart_threshold: int = 64 * 1024 * 1024,
        multipart_chunksize: int = 16 * 1024 * 1024,
        max_concurrency: int = 4,
    ) -> None:
        self.bucket = bucket
        self.region = region
        self.create_bucket = create_bucket
        config = Config(
            connect_timeout=connect_timeout_s,
            read_timeout=read_timeout_s,
            retries={"max_attempts": max_attempts, "mode": "standard"},
            signature_version="s3v4",
            # Path-style URLs work on every S3-compatible server (moto, MinIO, Ceph).
            s3={"addressing_style": "path"},
            # botocore >= 1.36 adds CRC trailers many S3-compatible servers reject; we verify
            # our own sha256 end to end instead.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        self._client: Any = boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint_url,
            region_name=region,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            config=config,
        )
        self._transfer = TransferConfig(
            multipart_threshold=multipart_threshold,
            multipart_chunksize=multipart_chunksize,
            max_concurrency=max_concurrency,
            num_download_attempts=max_attempts,
        )

    def put_file(self, key: str, path: Path) -> StoredObject:
        """Upload with the transfer manager (multipart above the threshold).

        The sha256 is computed in a pass before the upload, because S3 takes metadata when an
        upload starts; the second read of a just-written temp file comes from the page cache.
        """
        validate_key(key)
        sha256, size = sha256_of_file(path)
        with self._errors("upload", key):
            self._client.upload_file(
                str(path),
                self.bucket,
                key,
                ExtraArgs={"Metadata": {SHA256_METADATA: sha256}},
                Config=self._transfer,
            )
        return StoredObject(key, size, sha256)

    def get_file(self, key: str, dest: Path, expected_sha256: str) -> None:
        """Download with the transfer manager (ranged parts in parallel), then verify."""
        validate_key(key)
        with self._errors("download", key):
            self._client.download_file(self.bucket, key, str(dest), Config=self._transfer)
        verify_download(key, dest, expected_sha256)

    def open_chunks(self, key: str) -> Iterator[bytes]:
        """Start the GET now (so a missing object or outage fails here), then stream the body."""
        validate_key(key)
        with self._errors("download", key):
            response = self._client.get_object(Bucket=self.bucket, Key=key)
        return self._body_chunks(key, response["Body"])

    def stat(self, key: str) -> StoredObject:
        """Size and the sha256 recorded in the object's metadata."""
        validate_key(key)
        with self._errors("stat", key):
            head = self._client.head_object(Bucket=self.bucket, Key=key)
        return StoredObject(key, head["ContentLength"], head["Metadata"].get(SHA256_METADATA, ""))

    def exists(self, key: str) -> bool:
        """Whether an object is stored under `key`."""
        try:
            self.stat(key)
        except ObjectMissing:
            return False
        return True

    def delete(self, key: str) -> None:
        """Delete one object (S3 deletes are idempotent)."""
        validate_key(key)
        with self._errors("delete", key):
            self._client.delete_object(Bucket=self.bucket, Key=key)

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under `prefix`, a page (up to 1,000 keys) per request."""
        validate_delete_prefix(prefix)
        deleted = 0
        for keys in self._key_pages(prefix):
            with self._errors("delete", prefix):
                response = self._client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True},
                )
            if response.get("Errors"):
                first = response["Errors"][0]
                raise StoreUnavailable(f"S3 could not delete {first.get('Key')}: {first}")
            deleted += len(keys)
        return deleted

    def list_keys(self, prefix: str) -> list[str]:
        """All keys under `prefix`, sorted."""
        validate_prefix(prefix, allow_empty=True)
        return sorted(key for page in self._key_pages(prefix) for key in page)

    def presigned_url(self, key: str, expires_s: int) -> str | None:
        """A GET URL signed for `expires_s` seconds; signing needs no request to S3."""
        validate_key(key)
        with self._errors("sign", key):
            url: str = self._client.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires_s
            )
        return url

    def check(self) -> None:
        """HEAD the bucket, creating it first if allowed and missing."""
        try:
            with self._errors("check", self.bucket):
                self._client.head_bucket(Bucket=self.bucket)
        except ObjectMissing as exc:
            if not self.create_bucket:
                raise StoreUnavailable(f"bucket {self.bucket!r} does not exist") from exc
            with self._errors("create bucket", self.bucket):
                self._create_bucket()

    def _create_bucket(self) -> None:
        """Create the bucket; us-east-1 is the one region that takes no location constraint."""
        if self.region == "us-east-1":
            self._client.create_bucket(Bucket=self.bucket)
        else:
            self._client.create_bucket(
                Bucket=self.bucket, CreateBucketConfiguration={"LocationConstraint": self.region}
            )

    def _key_pages(self, prefix: str) -> Iterator[list[str]]:
        """Keys under `prefix`, one list per ListObjectsV2 page."""
        paginator = self._client.get_paginator("list_objects_v2")
        with self._errors("list", prefix):
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                keys = [item["Key"] for item in page.get("Contents", [])]
                if keys:
                    yield keys

    def _body_chunks(self, key: str, body: Any) -> Iterator[bytes]:
        """Yield a GET body in chunks, closing the connection even if the reader stops early."""
        try:
            with self._errors("download", key):
                yield from body.iter_chunks(CHUNK_BYTES)
        finally:
            body.close()

    @contextlib.contextmanager
    def _errors(self, action: str, key: str) -> Iterator[None]:
        """Turn boto3's errors into ObjectMissing or StoreUnavailable naming the action."""
        try:
            yield
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            if code in MISSING_CODES:
                raise ObjectMissing(f"no object {key!r} in bucket {self.bucket!r}") from exc
            raise StoreUnavailable(f"S3 refused {action} of {key!r}: {code} {error}") from exc
        except (BotoCoreError, Boto3Error) as exc:
            raise StoreUnavailable(f"S3 {action} of {key!r} failed: {exc}") from exc
