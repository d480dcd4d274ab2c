"""Helpers of tests/s3/run.sh and tests/kubernetes/run.sh: a moto S3 server's bucket, filled, read back, compared.

bucket.py put ENDPOINT s3://BUCKET/PREFIX FOLDER NAME   upload FOLDER's files as PREFIX/NAME/... (creates the bucket)
bucket.py get ENDPOINT s3://BUCKET/PREFIX DEST          download every key under PREFIX into DEST
bucket.py compare LOCAL DEST                            DEST's results/ equal LOCAL's (tests/slurm/compare.py)
"""

from __future__ import annotations

import sys
from pathlib import Path

import boto3


def _client(endpoint: str):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def _split(url: str) -> tuple[str, str]:
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    return bucket, prefix.strip("/")


def put(endpoint: str, url: str, folder: str, name: str) -> None:
    client, (bucket, prefix) = _client(endpoint), _split(url)
    if bucket not in {b["Name"] for b in client.list_buckets()["Buckets"]}:
        client.create_bucket(Bucket=bucket)
    files = [path for path in sorted(Path(folder).rglob("*")) if path.is_file()]
    for path in files:
        client.upload_file(str(path), bucket, f"{prefix}/{name}/{path.relative_to(folder).as_posix()}")
    print(f"uploaded {len(files)} files of {folder} to s3://{bucket}/{prefix}/{name}/")


def get(endpoint: str, url: str, dest: str) -> None:
    client, (bucket, prefix) = _client(endpoint), _split(url)
    keys = [
        obj["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
        for obj in page.get("Contents", [])
    ]
    for key in keys:
        target = Path(dest) / key[len(prefix) + 1 :]
        target.parent.mkdir(parents=True, exist_ok=True)
        client.download_file(bucket, key, str(target))
    print(f"downloaded {len(keys)} keys of s3://{bucket}/{prefix}/ to {dest}")


def compare(local: str, dest: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "slurm"))
    from compare import check_outputs  # the SLURM proof's comparison: one definition of "equal"

    check_outputs(Path(local), Path(dest), label="S3")


if __name__ == "__main__":
    {"put": put, "get": get, "compare": compare}[sys.argv[1]](*sys.argv[2:])
