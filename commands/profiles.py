"""`tierlab profiles`: the shipped profiles with a one-line summary each, then your own."""
from __future__ import annotations

import json

import click

from tierlab.commands.options import json_option

@click.command()
@click.argument("kind", required=False,
                type=click.Choice(["hardware", "models", "configs", "gpus", "cpus", "nvme"]))
@json_option
def profiles(kind, as_json):
    """List the shipped profiles with a one-line summary each, then your own.

    KIND is one of hardware (systems), models, configs (DeepSpeed presets), gpus, cpus, nvme;
    all of hardware, models and configs when omitted. Hardware is the catalogue
    (docs/catalogue.md); profiles of your own (`tierlab calibrate` writes them) are found by name
    in the folders $TIERLAB_PROFILES names (each holding hardware/systems, gpus, cpus, nvme; ':'
    between several), and listed after the catalogue.

    \b
    Examples:
      tierlab profiles models
      tierlab profiles hardware --json     # {"hardware": [{"name", "summary", "own"}, ...]}"""
    from tierlab.profiles.catalogue import list_catalogue, list_user_profiles

    kinds = [kind] if kind else ["hardware", "models", "configs"]
    if as_json:
        click.echo(json.dumps({k: [{"name": n, "summary": s, "own": own}
                                   for own, rows in ((False, list_catalogue(k)),
                                                     (True, list_user_profiles(k)))
                                   for n, s in rows] for k in kinds}, indent=2))
        return
    for k in kinds:
        click.echo(f"{k}:")
        for name, summary in list_catalogue(k):
            click.echo(f"  {name:28s} {summary}")
        if own := list_user_profiles(k):
            click.echo(f"{k} ($TIERLAB_PROFILES):")
            for name, summary in own:
                click.echo(f"  {name:28s} {summary}")
