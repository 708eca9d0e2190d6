"""The `agpt` command: a click group whose subcommands load lazily.

Each subcommand lives in its own module (`agpt.cli.NAME`, attribute `cli`) and is imported only when
it runs, so `agpt --help` and the recovery tools start fast and do not need torch.  Commands
implemented in Bash live in `bin/agpt-NAME`; they are listed here too so that one `--help` shows
everything a user can type.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click

from agpt import __version__
from agpt.errors import AgptError

# name -> (where, one-line help).  `where` is a click module (attribute `cli`), "bin" for a Bash
# command in bin/agpt-NAME, or "stdlib:MODULE" for a recovery-path tool whose MODULE.main(argv) parses
# its own arguments with argparse (standard library only, so it runs without the venv).
# fmt: off
COMMANDS: dict[str, tuple[str, str]] = {
    "blend": ("agpt.cli.blend", "Blend token shards by corpus weights into a pinned, per-batch mixture index."),
    "check": ("agpt.cli.check", "Check a config at its real size on a site before queueing: layout, batch, memory, data."),
    "ckpt": ("agpt.cli.ckpt", "Export to Hugging Face, import from it, inspect a checkpoint, size the save interval."),
    "chain": ("stdlib:agpt.chain", "Show a run's chain of jobs (JOB layer): start, end, steps, verdict."),
    "data": ("agpt.cli.data", "Verify a blended data set against its manifest, or inspect its mixture."),
    "eval": ("agpt.cli.eval", "Score multiple-choice tasks on an export (lm-eval, offline) or on held checkpoints."),
    "failover": ("stdlib:agpt.failover", "Classify a failed attempt, or report a run's recovery timeline (NODE layer)."),
    "jobgen": ("bin", "Generate a PBS or Slurm job script for a site from a run config (JOB layer)."),
    "monitor": ("agpt.cli.monitor", "Watch a run in the terminal: progress, throughput, the last failure, the hosts."),
    "mpi-hello": ("agpt.cli.mpihello", "Print rank, size and host from every MPI rank (a launcher check)."),
    "launch": ("bin", "Run a program on the job's active hosts with the site's launcher (JOB layer)."),
    "lr-find": ("agpt.cli.lrfind", "Sweep the learning rate exponentially over a short run and plot loss vs LR."),
    "plot": ("agpt.cli.plot", "Plot a run's loss curve with its failures and recoveries marked (PNG)."),
    "preflight": ("stdlib:agpt.preflight", "Check one host can train: launcher, device, collective backend, a small allreduce."),
    "report": ("agpt.cli.report", "Write a self-contained HTML page about a run: timeline, failures, curves."),
    "setup": ("bin", "Install the system packages and the pinned .venv this checkout needs."),
    "sim": ("agpt.cli.sim", "Simulate effective training time at 512-4,096 nodes with the real recovery decisions."),
    "site": ("agpt.cli.site", "List, show, check or detect site profiles."),
    "smoke": ("agpt.cli.smoke", "Run a short deterministic training and compare it bit for bit to a baseline."),
    "tokenize": ("agpt.cli.tokenize", "Tokenize text/JSONL/parquet into Megatron MMIDIDX shards, in parallel."),
    "tokenizer": ("agpt.cli.tokenizer", "Train a SentencePiece tokenizer from local text."),
    "train": ("agpt.cli.train", "Train a Llama-style model with FSDP2, async checkpoints and exact resume."),
    "watch": ("stdlib:agpt.watch.cli", "Run a command, kill it when its output goes idle, retry (PROCESS layer)."),
    "yeet": ("agpt.cli.yeet", "Broadcast a venv, checkpoint or dataset to every node's local storage."),
}
# fmt: on

ROOT = Path(__file__).resolve().parents[3]


def _pass_through(name: str, help_text: str, run: Callable[[list[str]], Any]) -> click.Command:
    """A command that hands every argument, --help included, to RUN: a Bash command or a standard-library tool
    that parses its own."""

    @click.command(
        name=name,
        help=help_text,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
        add_help_option=False,
    )
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def command(args: tuple[str, ...]) -> None:
        run(list(args))

    return command


def _run_bin(name: str, args: list[str]) -> NoReturn:
    """The Bash implementation `bin/agpt-NAME`, in this process's place."""
    exe = ROOT / "bin" / f"agpt-{name}"
    os.execv(str(exe), [str(exe), *args])


def _run_stdlib(module: str, args: list[str]) -> NoReturn:
    """A standard-library tool: `MODULE.main(argv)` (a package's in its `__main__`) parses and returns the exit
    code."""
    mod = importlib.import_module(module)
    if not hasattr(mod, "main"):  # a package run as `python -m PACKAGE`
        mod = importlib.import_module(f"{module}.__main__")
    sys.exit(mod.main(args))


class LazyGroup(click.Group):
    """A group that imports a subcommand's module only when that subcommand is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, help_text = COMMANDS[cmd_name]
        if module == "bin":
            return _pass_through(cmd_name, help_text, functools.partial(_run_bin, cmd_name))
        if module.startswith("stdlib:"):
            return _pass_through(
                cmd_name, help_text, functools.partial(_run_stdlib, module.removeprefix("stdlib:"))
            )
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                return _missing(cmd_name, help_text)
            raise
        cmd: click.Command = mod.cli
        return cmd

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in COMMANDS:
            names = ", ".join(sorted(COMMANDS))
            click.echo(f"agpt: unknown command '{name}' (commands: {names})", err=True)
            ctx.exit(2)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _missing(name: str, help_text: str) -> click.Command:
    @click.command(name=name, help=help_text)
    def run() -> None:
        raise click.ClickException(f"'{name}' is not installed in this checkout")

    return run


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100, "terminal_width": 100},
)
@click.version_option(__version__, prog_name="agpt")
def cli() -> None:
    """agpt: pre-train LLMs on supercomputers, and keep them training.

    Run `agpt COMMAND --help` for the options of each command.
    """


def usage_error(exc: click.UsageError) -> NoReturn:
    """A usage error as one line naming the command, plus where to read more; exit 2."""
    path = exc.ctx.command_path if exc.ctx is not None else "agpt"
    click.echo(f"{path}: error: {exc.format_message()}", err=True)
    click.echo(f"Try '{path} --help' for help.", err=True)
    sys.exit(exc.exit_code)


def main(argv: list[str] | None = None) -> Any:
    """Entry point: run the CLI and turn AgptError into one line on stderr and its exit code; a usage
    error is one line and a hint, not the whole usage text."""
    try:
        rv = cli.main(args=argv, prog_name="agpt", standalone_mode=False)
    except click.UsageError as exc:
        usage_error(exc)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("Aborted!", err=True)
        sys.exit(1)
    except AgptError as exc:
        click.echo(f"agpt: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    if isinstance(rv, int) and not isinstance(rv, bool):  # ctx.exit(N) outside a command: its code
        sys.exit(rv)
    return rv
