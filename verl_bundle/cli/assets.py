"""`verl-bundle assets`: the command line of the asset stage (registered by cli/main.py, which keeps
the one place output is written and errors become exit codes)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from verl_bundle.cli.options import CacheDir, Json, session_of, show


def assets_cmd(
    ctx: typer.Context,
    model: Annotated[
        list[str] | None, typer.Option("--model", help="A model repository: ID[@REVISION].")
    ] = None,
    dataset: Annotated[
        list[str] | None, typer.Option("--dataset", help="A dataset repository: ID[@REVISION].")
    ] = None,
    allow: Annotated[
        list[str] | None,
        typer.Option("--allow", help="Fetch only files matching (glob; ID:GLOB for one repo)."),
    ] = None,
    deny: Annotated[
        list[str] | None,
        typer.Option("--deny", help="Skip files matching (glob; ID:GLOB for one repo)."),
    ] = None,
    hf_endpoint: Annotated[
        str | None, typer.Option("--hf-endpoint", help="The Hub or its mirror (or HF_ENDPOINT).")
    ] = None,
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Directory for the tarball.")
    ] = Path("."),
    cache_dir: CacheDir = None,
    json_out: Json = False,
) -> None:
    """Fetch models and datasets (pinned to their commit, hashes checked), convert datasets to
    verl's parquet files, and write verl-assets-<slug>.tar for ./install-assets.sh on the server.

    HF_TOKEN is used for gated repositories and never shown. The last line is the tarball."""
    from verl_bundle.assets.fetch import Hub, parse_spec
    from verl_bundle.assets.plan import AssetsRequest, build_assets
    from verl_bundle.cli.render.results import assets
    from verl_bundle.net.cache import default_cache_dir
    from verl_bundle.progress import reporter

    hub = Hub.from_env(hf_endpoint, cache_dir or default_cache_dir())
    session_of(ctx).redact = hub.redact  # the token, and any password in the endpoint URL
    specs = [parse_spec("model", m) for m in model or []]
    specs += [parse_spec("dataset", d) for d in dataset or []]
    req = AssetsRequest(tuple(specs), hub, output, tuple(allow or ()), tuple(deny or ()))
    with reporter(quiet=json_out) as rep:
        result = assets(build_assets(req, rep))
    show(ctx, result, json_out)
