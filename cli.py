"""tierlab's command line: the `main` group and its verbs, one module each in tierlab/commands/
(parse, call one library function, print). The only layer that prints, writes files or exits.
Every verb resolves its scenario through `tierlab.scenario.resolve` (one resolver, defaults
written once); memory is printed in GiB. User errors (`ConfigError`) print one line
`error: ...` and exit 2; never a traceback.
"""
from __future__ import annotations

import logging
import sys

import click

from tierlab import __version__
from tierlab.commands.common import TierlabGroup
from tierlab.commands.verbs import Verbs

VERBS = ("profiles", "memory", "simulate", "run", "compare", "preflight", "calibrate", "validate",
         "plot", "sweep", "plan")
"""Every verb by name: `tierlab.commands.<name>.<name>`, imported when it is asked for
(commands/verbs.py); `tierlab --help` lists them all."""


@click.group(cls=TierlabGroup, commands=Verbs(VERBS),
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="tierlab",
                      message="%(prog)s %(version)s")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def main(verbose: int) -> None:
    """tierlab: will a DeepSpeed ZeRO offload run fit, how fast is a step, which tier binds?"""
    logging.basicConfig(level=[logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)],
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


if __name__ == "__main__":
    main()
