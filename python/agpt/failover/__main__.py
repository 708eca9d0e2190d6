"""`agpt failover SUBCOMMAND ...`: dispatch to the subcommand's module `main(argv) -> int`."""

from __future__ import annotations

import importlib
import sys

# subcommand -> (module, one-line help).  Each module defines main(argv: list[str]) -> int.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "classify": ("agpt.failover.classify", "Classify one attempt's log: class, bad hosts, evidence (JSON)."),
    "report": ("agpt.failover.report", "A human timeline of a run's attempts, swaps and time lost (--json)."),
    "plan": (
        "agpt.failover.plan",
        "Classify an attempt (in-process) and decide the failover loop's next step (JSON or --shell).",
    ),
    "hosts": ("agpt.failover.hosts", "Split an allocation into active and spare hosts, resolve addresses."),
    "score": (
        "agpt.failover.score",
        "Score the classifier on corpora of logs with expectations (right class and host, by class).",
    ),
    "patterns": (
        "agpt.failover.patterns",
        "List every pattern with its class and source; check their examples (site sets included).",
    ),
    "settings": (
        "agpt.failover.settings",
        "Check the settings the loop reads late (sweep, margin, straggler, floor, eval poll): exit 0 or 2.",
    ),
}


def usage() -> str:
    rows = "\n".join(f"  {name:<10} {text}" for name, (_, text) in SUBCOMMANDS.items())
    return f"Usage: agpt failover SUBCOMMAND [ARGS...]\n\nSubcommands:\n{rows}\n"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(usage())
        return 0
    name = args.pop(0)
    if name not in SUBCOMMANDS:
        sys.stderr.write(
            f"agpt failover: unknown subcommand '{name}' (subcommands: {', '.join(SUBCOMMANDS)})\n"
        )
        return 2
    module = importlib.import_module(SUBCOMMANDS[name][0])
    rc: int = module.main(args)
    return rc


if __name__ == "__main__":
    sys.exit(main())
