"""`agpt sim`: what effective training time the recovery code delivers at 512-4,096 nodes, by simulation."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from agpt.errors import ConfigError
from agpt.sim import engine, model, sweep, validate

MODEL_HELP = "fault model: a YAML file, or a shipped one (" + ", ".join(model.preset_names()) + ")"


def _spares(value: str | None) -> int | str | None:
    if value is None:
        return "keep"
    if value == "auto":
        return None
    try:
        n = int(value)
    except ValueError:
        raise ConfigError(f"--spares: a count or 'auto', got {value!r}") from None
    if n < 0:
        raise ConfigError(f"--spares: must not be negative, got {n}")
    return n


def _load(spec: str, nodes: int | None, spares: str | None, days: float | None) -> model.FaultModel:
    m = model.load(spec)
    kw: dict[str, object] = {}
    if nodes is not None:
        if nodes < 1:
            raise ConfigError(f"--nodes: must be at least 1, got {nodes}")
        kw["nodes"] = nodes
    sp = _spares(spares)
    if sp != "keep":
        kw["spares"] = sp
    if days is not None:
        if not days > 0:
            raise ConfigError(f"--days: must be greater than 0, got {days}")
        kw["horizon_days"] = days
    return model.override(m, **kw) if kw else m


@click.group(name="sim")
def cli() -> None:
    """Simulate a long run on many nodes: failures drawn from a fault model, recovered by the real failover
    classifier, planner, spare accounting and chain verdicts on a virtual clock.

    Example: agpt sim run --model aurora-20b --nodes 1024 --days 7
    """


@cli.command(name="run")
@click.option("--model", "spec", default="aurora-20b", show_default=True, help=MODEL_HELP)
@click.option("--nodes", type=int, help="active nodes (default: the model's)")
@click.option("--spares", help="spare nodes, or 'auto' (~2%, at least 4)")
@click.option("--heartbeats/--no-heartbeats", default=None, help="hangs named by heartbeats")
@click.option("--async-save/--sync-save", default=None, help="async or blocking checkpoint saves")
@click.option("--interval-s", type=float, help="checkpoint.interval_s: save by time instead of steps")
@click.option("--days", type=float, help="simulated days (default: the model's horizon_days)")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print the whole result as JSON")
def run_cmd(
    spec: str,
    nodes: int | None,
    spares: str | None,
    heartbeats: bool | None,
    async_save: bool | None,
    interval_s: float | None,
    days: float | None,
    seed: int,
    as_json: bool,
) -> None:
    """One simulated run: effective ratio, where the time went, the stops that need a person."""
    m = _load(spec, nodes, spares, days)
    kw: dict[str, object] = {}
    if heartbeats is not None:
        kw["heartbeats"] = heartbeats
    if async_save is not None:
        kw["async_save"] = async_save
    if interval_s is not None:
        if interval_s < 0:
            raise ConfigError(f"--interval-s: must not be negative, got {interval_s}")
        kw["checkpoint_interval_s"] = interval_s
    if kw:
        m = model.override(m, **kw)
    r = engine.simulate(m, seed=seed)
    d = r.as_dict()
    if as_json:
        click.echo(json.dumps(d, indent=1))
        return
    click.echo(
        f"{m.name}: {r.nodes} nodes + {r.spares} spares, {d['horizon_days']:g} days, seed {seed}, "
        f"heartbeats {'on' if r.heartbeats else 'off'}, {'async' if r.async_save else 'sync'} saves"
    )
    click.echo(
        f"effective training time ratio {r.effective_ratio:.4f} (productive / allocated {r.allocated_s / 3600:.1f} h); "
        f"steps per node-hour vs ideal {r.vs_ideal:.4f}; {r.steps} steps kept"
    )
    click.echo(f"failures {len(r.faults)} {d['failures_by_class']}; attempts {r.attempts}; jobs {r.jobs}")
    click.echo("time: " + ", ".join(f"{k.replace('_', ' ')} {v / 3600:.2f} h" for k, v in r.time.items()))
    clock = d["recovery_clock_s"]
    click.echo(
        f"recovery clock (mean, s after the failure): detected {clock['detected']}, relaunched "
        f"{clock['relaunched']}, first step back {clock['first_step_back']}"
    )
    stops = ", ".join(f"{v} {k}" for k, v in r.person_stops.items()) or "none"
    click.echo(f"stops that needed a person: {stops}")


@cli.command(name="table")
@click.option("--model", "spec", default="aurora-20b", show_default=True, help=MODEL_HELP)
@click.option("--nodes", default="512,1024,2048,4096", show_default=True, help="comma list of node counts")
@click.option("--days", type=float, help="simulated days per row (default: the model's horizon_days)")
@click.option("--seeds", default="1", show_default=True, help="comma list of seeds, averaged")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=Path("."),
    show_default=True,
    help="folder for goodput.md and goodput.png",
)
def table_cmd(spec: str, nodes: str, days: float | None, seeds: str, out: Path) -> None:
    """The goodput table and figure (docs/sim/): every node count with and without spares, heartbeats, async saves."""
    m = _load(spec, None, None, days)
    try:
        ns = [int(x) for x in nodes.split(",") if x.strip()]
        ss = [int(x) for x in seeds.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(
            f"--nodes/--seeds: comma lists of whole numbers, got {nodes!r} / {seeds!r}"
        ) from None
    if not ns or min(ns) < 1:
        raise ConfigError(f"--nodes: node counts of at least 1, got {nodes!r}")
    if not ss:
        raise ConfigError("--seeds: at least one seed")
    from agpt.progress import Progress

    with Progress(len(ns) * len(sweep.VARIANTS) * len(ss), "sim table", unit="runs") as bar:

        def done(line: str) -> None:  # each simulation's result line, above the bar
            bar.write(line)
            bar.update()

        rows = sweep.sweep(m, nodes=ns, seeds=ss, progress=done)
    out.mkdir(parents=True, exist_ok=True)
    text = sweep.table(rows, m) + "\n\n" + sweep.headline(rows, nodes=ns[0]) + "\n"
    (out / "goodput.md").write_text(text)
    sweep.plot(rows, out / "goodput.png", m)
    click.echo(text)
    click.echo(f"wrote {out / 'goodput.md'} and {out / 'goodput.png'}")


@cli.command(name="chaos")
@click.option(
    "--seed", type=int, default=1, show_default=True, help="the chaos test's --seed (its fault schedule)"
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
