"""RUN_DIR/metrics.prom: the run's figures in the Prometheus text format, rewritten atomically.

For node_exporter's textfile collector (`--collector.textfile.directory` pointed at a folder holding the file
or a link to it) or a push gateway a site runs (`curl --data-binary @RUN_DIR/metrics.prom
http://GATEWAY:9091/metrics/job/agpt`).  The format is written here with the standard library
(https://prometheus.io/docs/instrumenting/exposition_formats/#text-based-format), so two writers share it:
the trainer's rank 0 (agpt.observe.writers, at most every `observe.prometheus_interval_s`) and the failover
loop after every attempt (`python -m agpt.observe.prom RUN_DIR`, lib/failover.sh), which is how attempts and
failures update while no trainer runs.  Both compute the whole file from the run directory, so whichever wrote
last is complete.  Counters are counts of append-only records (events.jsonl, hosts/bad, health.jsonl): they
only grow.  Every sample carries `run="<run directory name>"`, so several runs can share one collector.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agpt import rundir, safewrite
from agpt.errors import BadInput
from agpt.observe import status as ostatus

Sample = tuple[dict[str, str], float]
# name -> (type, help).  Base units (seconds, bytes, ratios 0..1), `_total` on counters.
METRICS: dict[str, tuple[str, str]] = {
    "agpt_step": ("gauge", "Optimizer steps done (the newest logged step)."),
    "agpt_steps_target": ("gauge", "train.steps: where the run stops."),
    "agpt_tokens": ("gauge", "Tokens consumed since the start of training (goes back to the checkpoint's on a resume)."),
    "agpt_tokens_target": ("gauge", "Tokens the run consumes by train.steps."),
    "agpt_loss": ("gauge", "Training loss of the newest logged step."),
    "agpt_eval_loss": ("gauge", "Held-out loss at the newest evaluation, per corpus (corpus=\"all\": every token)."),
    "agpt_tokens_per_second": ("gauge", "Tokens per second, all devices."),
    "agpt_tokens_per_second_per_device": ("gauge", "Tokens per second per device."),
    "agpt_mfu": ("gauge", "Model FLOPs utilisation, 0..1 (needs SITE_PEAK_TFLOPS)."),
    "agpt_step_seconds": ("gauge", "Wall seconds per step over the newest log window."),
    "agpt_devices": ("gauge", "Ranks (devices) in the running job."),
    "agpt_peak_memory_bytes": ("gauge", "Peak allocated bytes on rank 0's device."),
    "agpt_last_step_timestamp_seconds": ("gauge", "Unix time of the newest logged step (alert on time() minus this)."),
    "agpt_seconds_since_last_step": ("gauge", "Seconds from the newest logged step to this file's writing."),
    "agpt_eta_seconds": ("gauge", "Steps left times the recent step time (failures not counted)."),
    "agpt_effective_ratio": ("gauge", "Productive step time over the attempts' wall time so far (agpt failover report)."),
    "agpt_hosts": ("gauge", "Hosts per state: active, spare, bad (proven), blind (evicted blind, still usable)."),
    "agpt_attempt_running": ("gauge", "1 while the newest attempt has not been classified yet."),
    "agpt_time_lost_seconds": ("gauge", "Training time lost after the last checkpoints, as agpt failover report counts it."),
    "agpt_attempts_total": ("counter", "Attempts ended, by failure class (success and walltime included)."),
    "agpt_failures_total": ("counter", "Attempts that ended in a failure (not success, walltime or a clean stop)."),
    "agpt_hosts_evicted_total": ("counter", "Lines of hosts/bad: why=evidence (proven) or why=blind."),
    "agpt_rollbacks_total": ("counter", "In-process rollbacks past a non-finite or spiking loss (health.jsonl)."),
}  # fmt: skip


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return str(int(v)) if float(v).is_integer() and abs(v) < 2**53 else repr(float(v))


def render(families: dict[str, list[Sample]], labels: dict[str, str]) -> str:
    """The text format: HELP and TYPE once per family, one line per sample, families in METRICS' order."""
    out = []
    for name, (kind, text) in METRICS.items():
        samples = families.get(name)
        if not samples:
            continue
        out.append(f"# HELP {name} {text}")
        out.append(f"# TYPE {name} {kind}")
        for extra, v in samples:
            lab = ",".join(f'{k}="{_escape(x)}"' for k, x in {**labels, **extra}.items())
            out.append(f"{name}{{{lab}}} {_value(v)}")
    return "\n".join(out) + "\n"


def _put(fam: dict[str, list[Sample]], name: str, value: Any, **labels: str) -> None:
    v = rundir.num(value)
    if v is not None:
        fam.setdefault(name, []).append((labels, v))


def families(st: ostatus.Status) -> dict[str, list[Sample]]:
    fam: dict[str, list[Sample]] = {}
    last = st.last
    for name, key in (("agpt_step", "step"), ("agpt_steps_target", "target_steps"), ("agpt_tokens", "tokens"),
                      ("agpt_tokens_target", "target_tokens"), ("agpt_loss", "loss"),
                      ("agpt_tokens_per_second_per_device", "tokens_per_s_per_device"), ("agpt_mfu", "mfu"),
                      ("agpt_step_seconds", "step_s"), ("agpt_devices", "devices"),
                      ("agpt_peak_memory_bytes", "peak_mem_bytes"),
                      ("agpt_last_step_timestamp_seconds", "time")):  # fmt: skip
        _put(fam, name, last.get(key))
    _put(fam, "agpt_tokens_per_second", st.tokens_per_s)
    _put(fam, "agpt_seconds_since_last_step", st.since_step_s)
    _put(fam, "agpt_eta_seconds", st.eta_s)
    evals = next((r for r in reversed(st.recent) if "eval_loss" in r), None)
    if evals is not None:
        _put(fam, "agpt_eval_loss", evals.get("eval_loss"), corpus="all")
        for corpus, v in sorted((evals.get("eval") or {}).items()):
            _put(fam, "agpt_eval_loss", v, corpus=str(corpus))
    _put(fam, "agpt_effective_ratio", st.goodput.get("effective_ratio"))
    for state in ("active", "spare", "bad", "blind"):
        _put(fam, "agpt_hosts", st.hosts[state], state=state)
    if st.current is not None:
        _put(fam, "agpt_attempt_running", 1 if st.current["running"] else 0)
    _put(fam, "agpt_time_lost_seconds", st.totals.get("lost_s"))
    classes = st.totals.get("classes", {})
    for cls in rundir.CLASSES:  # every class, 0 included: a series that appears later breaks rate()
        _put(fam, "agpt_attempts_total", classes.get(cls, 0), **{"class": cls})
    _put(fam, "agpt_failures_total", len(st.failures))
    _put(fam, "agpt_hosts_evicted_total", st.hosts["evicted_evidence"], why="evidence")
    _put(fam, "agpt_hosts_evicted_total", st.hosts["evicted_blind"], why="blind")
    _put(fam, "agpt_rollbacks_total", st.rollbacks)
    return fam


def text(st: ostatus.Status) -> str:
    return render(families(st), {"run": st.run_dir.resolve().name})


def write_atomic(path: Path, body: str) -> None:
    """Replace `path` in one rename (a collector never reads half a file); no fsync: it is rewritten often."""
    safewrite.replace(path, body, sync=False)


def update(run_dir: str | Path, *, recent: Iterable[dict[str, Any]] | None = None) -> Path:
    """Rewrite RUN_DIR/metrics.prom from the run directory; `recent` (the trainer's newest records) saves a
    read of metrics.jsonl."""
    st = ostatus.snapshot(run_dir, tail_bytes=0 if recent is not None else ostatus.TAIL_BYTES, beats=False)
    if recent is not None:
        st.recent = list(recent)
    path = st.run_dir / rundir.PROM
    write_atomic(path, text(st))
    return path


def main(argv: list[str] | None = None) -> int:
    """`python -m agpt.observe.prom RUN_DIR`: what the failover loop calls after every attempt."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0].startswith("-"):
        sys.stderr.write("usage: python -m agpt.observe.prom RUN_DIR  (rewrites RUN_DIR/metrics.prom)\n")
        return 2
    try:
        update(args[0])
    except BadInput as e:
        sys.stderr.write(f"agpt: error: {e}\n")
        return 2
    except OSError as e:
        sys.stderr.write(f"agpt: warning: {args[0]}/{rundir.PROM}: not written ({e.strerror or e})\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
