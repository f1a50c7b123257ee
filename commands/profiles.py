"""`tierlab profiles`: the shipped profiles with a one-line summary each, then your own."""
from __future__ import annotations

import click


@click.command()
@click.argument("kind", required=False,
                type=click.Choice(["hardware", "models", "configs", "gpus", "cpus", "nvme"]))
def profiles(kind):
    """List the shipped profiles with a one-line summary each, then your own.

    KIND is one of hardware (systems), models, configs (DeepSpeed presets), gpus, cpus, nvme;
    all of hardware, models and configs when omitted. Hardware is the catalogue
    (docs/catalogue.md); profiles of your own (`tierlab calibrate` writes them) are found by name
    in the folders $TIERLAB_PROFILES names (each holding hardware/systems, gpus, cpus, nvme; ':'
    between several), and listed after the catalogue."""
    from tierlab.profiles.catalogue import list_catalogue, list_user_profiles

    for k in [kind] if kind else ["hardware", "models", "configs"]:
        click.echo(f"{k}:")
        for name, summary in list_catalogue(k):
            click.echo(f"  {name:28s} {summary}")
        if own := list_user_profiles(k):
            click.echo(f"{k} ($TIERLAB_PROFILES):")
            for name, summary in own:
                click.echo(f"  {name:28s} {summary}")
