"""`agpt site list|show|check|detect`: the site profiles under site/ (see site/_template/profile.sh)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from agpt import site as s
from agpt.errors import ConfigError


@click.group(name="site")
def cli() -> None:
    """List, show, check or detect site profiles (site/NAME/profile.sh)."""


@cli.command(name="list")
def list_cmd() -> None:
    """One line per site: name, scheduler, launcher, description."""
    for name in s.list_sites():
        e = s.parse_profile(s.site_dir() / name / "profile.sh").entries

        def get(key: str, entries: dict[str, s.Entry] = e) -> str:
            v = entries[key].value if key in entries else "?"
            return v if isinstance(v, str) else " ".join(v)

        click.echo(
            f"{name:<12} {get('SITE_SCHEDULER'):<6} {get('SITE_LAUNCHER'):<8} {get('SITE_DESCRIPTION')}"
        )


@cli.command(name="show")
@click.argument("site", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print {key: {value, file, line}} as JSON.")
def show_cmd(site: str | None, as_json: bool) -> None:
    """Each resolved value of SITE (default: the detected site) and the file:line it came from."""
    path = s.profile_path(site or s.detect())
    prof = s.check_profile(path)
    if prof.errors:
        raise ConfigError(prof.errors[0])
    values = s.resolve_profile(path)
    where = s.display_path(path)
    if as_json:
        data = {k: {"value": values.get(k, ""), "file": where, "line": prof.entries[k].line} for k in s.KEYS}
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(f"# site {path.parent.name}: {where}")
    width = max(len(k) for k in s.KEYS)
    for k in s.KEYS:
        origin = f"{where}:{prof.entries[k].line}"
        click.echo(f"{k:<{width}}  {origin:<{len(where) + 4}}  {s.format_value(values.get(k, ''))}")


@cli.command(name="check")
@click.argument("paths", nargs=-1, required=True)
def check_cmd(paths: tuple[str, ...]) -> None:
    """Check profiles (names or paths): unknown, missing, duplicate or ill-typed keys, each with its line."""
    failed = 0
    for p in paths:
        prof = s.check_profile(s.profile_path(p))
        if prof.errors:
            failed += 1
            for err in prof.errors:
                click.echo(f"agpt site check: {err}", err=True)
        else:
            click.echo(f"{s.display_path(Path(prof.path))}: ok ({len(prof.entries)} keys)")
    if failed:
        sys.exit(2)


@cli.command(name="detect")
@click.option("--hostname", "hostname", help="Detect for this host name instead of this host's.")
def detect_cmd(hostname: str | None) -> None:
    """Print the site for this host (AGPT_SITE overrides; `generic` when nothing else matches)."""
    click.echo(s.detect([hostname] if hostname else None))
