"""`hookaudit log ship` and `hookaudit log prune`: sealed segments to object storage."""

from __future__ import annotations

from pathlib import Path

import click

from engine.errors import HookauditError
from hookaudit.stream_cmd import data_dir_option, fail
from ingest.protocol import default_data_dir

__all__ = ["prune_cmd", "ship_cmd"]


def _data_dir(data_dir: Path | None) -> Path:
    return data_dir or default_data_dir()  # it exists: data_dir_option checked


@click.command("ship")
@data_dir_option
@click.option("--to", "to", required=True, metavar="s3://BUCKET[/PREFIX]",
              help="Where to ship (the bucket must exist).")  # fmt: skip
@click.option(
    "--endpoint-url",
    metavar="URL",
    default=None,
    help="S3-compatible endpoint, e.g. http://minio:9000 (env HOOKAUDIT_S3_ENDPOINT, then "
    "AWS_ENDPOINT_URL; default AWS). Credentials: the AWS variables "
    "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_PROFILE), region AWS_REGION.",
)
@click.option("--worker", "worker_name", default=None, help="Only this worker's chain.")
def ship_cmd(data_dir: Path | None, to: str, endpoint_url: str | None,
             worker_name: str | None) -> None:  # fmt: skip
    """Upload sealed segments and manifests to S3-compatible object storage, verified.

    Each segment not yet shipped is checked against its manifest line, uploaded, read
    back and checked again (sha256), then recorded in <data-dir>/log/shipped/. The
    manifest goes last. Queries and replay read a shipped segment from the bucket once
    `hookaudit log prune --shipped` has removed the local copy. Safe to run from cron:
    what is shipped is skipped.

    \b
    Example:
      AWS_ACCESS_KEY_ID=… AWS_SECRET_ACCESS_KEY=… \\
        hookaudit log ship --data-dir ./data --to s3://audit/hookaudit --endpoint-url http://127.0.0.1:9000
    """
    from contextlib import ExitStack

    from hookaudit.progress import Bar
    from ingest.log.objstore import open_store
    from ingest.log.ship import ship

    d = _data_dir(data_dir)
    with ExitStack() as stack:
        bar: list[Bar] = []

        def planned(segments: int, records: int) -> None:
            click.echo(f"shipping {segments} segment(s), {records} records", err=True)
            bar.append(stack.enter_context(Bar("shipping", total=segments, unit="segments")))

        def shipped_one(line: str) -> None:
            if bar and bar[0].shown:
                bar[0].advance()
            else:
                click.echo(line, err=True)

        try:
            store = open_store(to, endpoint=endpoint_url)
            done = ship(d, store, worker=worker_name, progress=shipped_one, planned=planned)
        except (HookauditError, ValueError) as exc:
            stack.close()
            fail(str(exc))
            return
    records = sum(1 for _ in done)
    click.echo(f"shipped {records} segment(s) to {store.url}")


@click.command("prune")
@data_dir_option
@click.option("--shipped", is_flag=True,
              help="Remove local copies of shipped segments (required: the only mode).")  # fmt: skip
def prune_cmd(data_dir: Path | None, shipped: bool) -> None:
    """Delete the local Parquet of segments shipped and verified, after reading each object
    again and checking its sha256 against the manifest. The keys index and the manifest
    stay local; queries, replay and verify then read those segments from the bucket.

    \b
    Example:
      hookaudit log prune --shipped --data-dir ./data
    """
    from ingest.log.ship import prune

    if not shipped:
        raise click.UsageError("prune needs --shipped (it removes only shipped, verified copies)")
    d = _data_dir(data_dir)
    try:
        count, freed = prune(d, progress=lambda m: click.echo(m, err=True))
    except HookauditError as exc:
        fail(str(exc))
        return
    click.echo(f"pruned {count} shipped segment(s), {freed} bytes freed")
