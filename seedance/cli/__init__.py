"""The ``seedance`` command: a thin layer over the Python API.

Every public module of this package (no leading underscore) exposes ``command``, a click command or group, and is
registered here automatically, so adding a sub-command means adding one module. Errors a user can cause
(:class:`seedance.errors.SeedanceError`, click usage errors) print one line on stderr and exit with status 2; with
``--json`` a command prints exactly one JSON object on stdout.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import click

from seedance import __version__
from seedance.errors import SeedanceError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="seedance")
def cli() -> None:
    """seedance — consistency and consensus protocols on GPU clusters, simulated and real."""


def _register() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        cli.add_command(module.command)


_register()


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, turning input errors into one line and exit status 2."""
    try:
        result = cli.main(args=argv, prog_name="seedance", standalone_mode=False)
    except SeedanceError as err:
        click.echo(f"seedance: error: {err}", err=True)
        return 2
    except click.exceptions.NoArgsIsHelpError as err:  # bare `seedance` (or a bare group): its help, on stdout
        click.echo(err.ctx.get_help() if err.ctx else str(err))
        return 0
    except click.UsageError as err:
        where = f"{err.ctx.command_path}: " if err.ctx else ""
        click.echo(" ".join(f"seedance: error: {where}{err.format_message()}".splitlines()), err=True)
        return 2
    except click.exceptions.Exit as err:
        return err.exit_code
    except click.Abort:
        click.echo("seedance: aborted", err=True)
        return 130
    except click.ClickException as err:
        click.echo(" ".join(f"seedance: error: {err.format_message()}".splitlines()), err=True)
        return err.exit_code
    return result if isinstance(result, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
