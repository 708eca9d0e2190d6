"""`agpt sim`: what effective training time the recovery code delivers at 512-4,096 nodes, by simulation."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from agpt import numeric, safewrite
from agpt.cli import params
from agpt.errors import ConfigError
from agpt.sim import engine, model, sweep, validate

MODEL_HELP = "fault model: a YAML file, or a shipped one (" + ", ".join(model.preset_names()) + ")"


def _spares(value: str | None) -> int | str | None:
    if value is None:
        return "keep"
    if value == "auto":
        return None
    return numeric.whole(value, "--spares (a count or 'auto')", maximum=numeric.MAX_NODES)


def _load(spec: str, nodes: int | None, spares: str | None, days: float | None) -> model.FaultModel:
    m = model.load(spec)
    kw: dict[str, object] = {}
    if nodes is not None:
        kw["nodes"] = nodes
    sp = _spares(spares)
    if sp != "keep":
        kw["spares"] = sp
    if days is not None:
        if not days > 0:
            raise ConfigError(f"--days: must be greater than 0, got {days}")
        kw["horizon_days"] = days
    return model.override(m, **kw) if kw else m


def _counts(text: str, flag: str, lo: int, hi: int) -> list[int]:
    """A comma list of whole numbers from LO to HI (at least one), each through agpt.numeric."""
    values = [numeric.whole(x, flag, minimum=lo, maximum=hi) for x in text.split(",") if x.strip()]
    if not values:
        raise ConfigError(f"{flag}: a comma list of at least one whole number, got {text!r}")
    return values


@click.group(name="sim")
def cli() -> None:
    """Simulate a long run on many nodes: failures drawn from a fault model, recovered by the real failover
    classifier, planner, spare accounting and chain verdicts on a virtual clock.

    Example: agpt sim run --model aurora-20b --nodes 1024 --days 7
    """


@cli.command(name="run")
@click.option("--model", "spec", default="aurora-20b", show_default=True, help=MODEL_HELP)
@click.option("--nodes", type=params.count(1, numeric.MAX_NODES), help="active nodes (default: the model's)")
@click.option("--spares", help="spare nodes, or 'auto' (~2%, at least 4)")
@click.option(
    "--heartbeats/--no-heartbeats",
    default=None,
    help="hangs named by heartbeats (default: the model's; the trainer's heartbeat.enabled, on)",
)
@click.option("--async-save/--sync-save", default=None, help="async or blocking checkpoint saves")
@click.option(
    "--interval-s",
    type=params.seconds(),
    help="checkpoint.interval_s: save by time (default: the job-start plan's, Young/Daly)",
)
@click.option("--interval", "interval_steps", type=params.count(), help="checkpoint.interval: steps between "
              "saves (0: by --interval-s alone)")  # fmt: skip
@click.option("--local-tier/--no-local-tier", default=None,
              help="the local checkpoint tier at Daly's interval for its own stall (default: the job-start "
              "plan's: on where the site's SITE_HOST_MEM_GIB holds it)")  # fmt: skip
@click.option("--local-interval-s", type=params.seconds(), help="the local tier's interval instead of Daly's")
@click.option("--local-stage-gb-s", type=params.Number(lo=0, hi=1e6), help="the local save's staging copy, "
              "GB/s per device (model: costs.local_stage_gb_s)")  # fmt: skip
@click.option(
    "--days",
    type=params.Number(lo=0, hi=numeric.MAX_DAYS),
    help="simulated days (default: the model's horizon_days)",
)
@click.option(
    "--shrink/--no-shrink", default=None, help="FAILOVER_SHRINK: fewer nodes when the spares run out"
)
@click.option(
    "--min-nodes", help="FAILOVER_MIN_NODES: a count, or a fraction of the nodes (default: the model's)"
)
@click.option("--straggler", type=click.Choice(model.STRAGGLER_MODES, case_sensitive=False),
              help="FAILOVER_STRAGGLER: swap stops the trainer at a checkpoint and swaps a straggler the heartbeats "
              "find (needs --heartbeats); report only names it (default: the model's)")  # fmt: skip
@click.option("--seed", type=params.SEED, default=1, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print the whole result as JSON")
def run_cmd(
    spec: str,
    nodes: int | None,
    spares: str | None,
    heartbeats: bool | None,
    async_save: bool | None,
    interval_s: float | None,
    interval_steps: int | None,
    local_tier: bool | None,
    local_interval_s: float | None,
    local_stage_gb_s: float | None,
    days: float | None,
    shrink: bool | None,
    min_nodes: str | None,
    straggler: str | None,
    seed: int,
    as_json: bool,
) -> None:
    """One simulated run: effective ratio, where the time went, the stops that need a person."""
    m = _load(spec, nodes, spares, days)
    for flag, v in (("--local-interval-s", local_interval_s), ("--local-stage-gb-s", local_stage_gb_s)):
        if v is not None and not v > 0:
            raise ConfigError(f"{flag}: must be greater than 0, got {v}")
    if local_stage_gb_s is not None:
        m.costs.local_stage_gb_s = local_stage_gb_s
    if interval_steps is not None:
        if interval_steps < 0:
            raise ConfigError(f"--interval: must not be negative, got {interval_steps}")
        m.train.checkpoint_interval = interval_steps
        # the flag sets it, as a config's key would
        m.pinned |= {"checkpoint_interval", "checkpoint_interval_s"}
    given = (("shrink", shrink), ("min_nodes", min_nodes), ("straggler", straggler), ("heartbeats", heartbeats),
             ("async_save", async_save))  # fmt: skip
    kw: dict[str, object] = {k: v for k, v in given if v is not None}
    if interval_s is not None:
        if interval_s < 0:
            raise ConfigError(f"--interval-s: must not be negative, got {interval_s}")
        kw["checkpoint_interval_s"] = interval_s
    if local_tier is not None or local_interval_s is not None:
        kw["local_tier"] = local_tier is not False
    if kw:
        m = model.override(m, **kw)
    if local_interval_s is not None and m.train.local:
        m.train.local_interval_s = local_interval_s
    r = engine.simulate(m, seed=seed)
    if as_json:
        click.echo(json.dumps(r.as_dict(), indent=1))
        return
    _show(m, r, seed)


def _show(m: model.FaultModel, r: engine.Result, seed: int) -> None:
    """`agpt sim run`'s text: the ratio, the failures, where the time went, the recovery clock, the local tier."""
    d = r.as_dict()
    click.echo(
        f"{m.name}: {r.nodes} nodes + {r.spares} spares, {d['horizon_days']:g} days, seed {seed}, "
        f"heartbeats {'on' if r.heartbeats else 'off'}, {'async' if r.async_save else 'sync'} saves, stragglers "
        f"{'swapped' if m.heartbeats and m.failover.straggler == 'swap' else 'kept'}"
    )
    click.echo(
        f"effective training time ratio {r.effective_ratio:.4f} (productive / allocated {r.allocated_s / 3600:.1f} h); "
        f"steps per node-hour vs ideal {r.vs_ideal:.4f}; {r.steps} steps kept"
    )
    click.echo(f"failures {len(r.faults)} {d['failures_by_class']}; attempts {r.attempts}; jobs {r.jobs}")
    if m.failover.shrink:
        click.echo(f"shrinks {r.shrinks} (FAILOVER_MIN_NODES={m.failover.min_nodes}): {r.shrunk_s / 3600:.1f} h "
                   "on fewer nodes")  # fmt: skip
    else:
        click.echo("shrinks: off (FAILOVER_SHRINK=0)")
    click.echo("time: " + ", ".join(f"{k.replace('_', ' ')} {v / 3600:.2f} h" for k, v in r.time.items()))
    clock = d["recovery_clock_s"]
    click.echo(
        f"recovery clock (mean, s after the failure): detected {clock['detected']}, relaunched "
        f"{clock['relaunched']}, first step back {clock['first_step_back']}"
    )
    back = d["first_step_back_s"]

    def stat(s: dict[str, object]) -> str:
        return f"p50 {s['p50']}, p95 {s['p95']}, mean {s['mean']} ({s['n']})" if s["n"] else "none"

    click.echo(
        "first step back after a failure (s; nearest-rank p50, p95, mean, (failures)): "
        + "; ".join(f"{c} {stat(s)}" for c, s in back["by_class"].items())
    )
    click.echo(
        f"  all failures {stat(back['all'])}; in the job (no site outage, no wait for the next job) "
        f"{stat(back['in_job'])}; site outages {stat(back['site_outages'])}; waited for the next job "
        f"{stat(back['next_job'])}"
    )
    cold = d["cold_start_s"]
    if cold is not None:
        click.echo(
            f"cold start of a chained job's first attempt (its start to its first step, mean of {cold['jobs']} "
            f"jobs): {cold['mean']} s: " + ", ".join(f"{k} {v}" for k, v in cold["stages"].items())
        )
    if r.local is not None:
        lt = r.local
        click.echo(
            f"local tier: a save every {lt['interval_s']:g} s, stalling {lt['stall_s']:g} s, complete {lt['write_s']:g} s "
            f"later; restore {lt['restore_s']:g} s ({clock.get('local_restores', 0)} restores); "
            f"{lt['state_gb_per_device']:g} GB per device, {lt['memory_gb_per_node']:g} GB per node at most; first "
            f"step back after a node failure {clock.get('first_step_back_node')} s (mean); stages: "
            + ", ".join(f"{k} {v}" for k, v in (clock.get("stages") or {}).items())
        )
    stops = ", ".join(f"{v} {k}" for k, v in r.person_stops.items()) or "none"
    click.echo(f"stops that needed a person: {stops}")


def _variants(values: tuple[str, ...]) -> list[tuple[str, dict[str, object]]]:
    """The variants of --variants: each value split on ';' when it has one, else taken whole when it is a name
    (`no spares, no shrink` holds a comma), else split on ','; none named is ConfigError."""
    known = [n for n, _ in sweep.VARIANTS]
    names: list[str] = []
    for v in values:
        parts = v.split(";") if ";" in v else [v] if v.strip() in known else v.split(",")
        names += [p.strip() for p in parts if p.strip()]
    if not names:
        raise ConfigError(f"--variants: names no variant ({'; '.join(known)})")
    return sweep.pick(names)


@cli.command(name="table")
@click.option("--model", "spec", default="aurora-20b", show_default=True, help=MODEL_HELP)
@click.option("--nodes", default="512,1024,2048,4096", show_default=True, help="comma list of node counts")
@click.option(
    "--days",
    type=params.Number(lo=0, hi=numeric.MAX_DAYS),
    help="simulated days per row (default: the model's horizon_days)",
)
@click.option("--seeds", default="1", show_default=True,
              help="comma list of seeds: every one for " + " and ".join(sweep.ALL_SEEDS) + " (mean and range), "
              "the first for the other variants")  # fmt: skip
@click.option(
    "--jobs",
    type=params.count(lo=1, hi=256),
    default=1,
    show_default=True,
    help="simulations run at once (processes); the table is the same for any count",
)
@click.option(
    "--variants",
    multiple=True,
    help="the variants to run, separated by ';' or ',' or the flag repeated; a name holding a comma ('no spares, "
    "no shrink') is taken whole, or give it with ';' or its own flag (default all: "
    + "; ".join(n for n, _ in sweep.VARIANTS)
    + ")",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=Path("."),
    show_default=True,
    help="folder for goodput.md and goodput.png",
)
def table_cmd(
    spec: str, nodes: str, days: float | None, seeds: str, jobs: int, variants: tuple[str, ...], out: Path
) -> None:
    """The goodput table and figure (docs/sim/): every node count as shipped (what a committed job script runs:
    every default, and the checkpoint plan its `agpt check` makes), and one knob changed per variant.

    Example (docs/sim/goodput.md): agpt sim table --seeds 1,2,3 --jobs 2 --out docs/sim"""
    m = _load(spec, None, None, days)
    ns = _counts(nodes, "--nodes", 1, numeric.MAX_NODES)
    ss = _counts(seeds, "--seeds", 0, 2**63 - 1)
    if out.exists() and not out.is_dir():
        raise ConfigError(
            f"--out: {out} exists and is not a folder (goodput.md and goodput.png go in a folder)"
        )
    chosen = _variants(variants) if variants else sweep.VARIANTS
    from agpt.progress import Progress

    runs = len(ns) * sum(len(ss) if name in sweep.ALL_SEEDS else 1 for name, _ in chosen)
    with Progress(runs, "sim table", unit="runs") as bar:

        def done(line: str) -> None:  # each simulation's result line, above the bar
            bar.write(line)
            bar.update()

        rows = sweep.sweep(m, nodes=ns, seeds=ss, variants=chosen, progress=done, jobs=jobs)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--out: cannot create {out} ({e.strerror})") from None
    text = sweep.table(rows, m) + "\n\n" + sweep.headline(rows, nodes=ns[0]) + "\n"
    safewrite.replace(out / "goodput.md", text)
    sweep.plot(rows, out / "goodput.png", m)
    click.echo(text)
    click.echo(f"wrote {out / 'goodput.md'} and {out / 'goodput.png'}")


@cli.command(name="chaos")
@click.option(
    "--seed",
    type=params.SEED,
    default=1,
    show_default=True,
    help="the chaos test's --seed (its fault schedule)",
)
def chaos_cmd(seed: int) -> None:
    """The chaos test's run, simulated: steps lost per fault and the effective ratio against its record."""
    sched = validate.chaos_schedule(seed)
    pred = validate.predict(sched)
    click.echo("schedule: " + ", ".join(f"{k}@{s}" for k, s in sched))
    for kind, lost in pred["steps_lost"].items():
        lo, hi = validate.RECORDED["steps_lost"][kind]
        click.echo(f"{kind:<6} steps lost: simulated {lost}, recorded {lo}-{hi}")
    lo, hi = validate.RECORDED["effective_ratio"]
    click.echo(f"effective ratio: simulated {pred['effective_ratio']}, recorded {lo}-{hi}")
    bad = validate.compare(pred)
    for line in bad:
        click.echo(f"outside the tolerance: {line}", err=True)
    sys.exit(1 if bad else 0)
