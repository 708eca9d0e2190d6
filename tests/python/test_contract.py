"""docs/contract.md says what the code does: exit codes, verdicts, run-directory files, settings' defaults."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from agpt import errors, rundir
from agpt.chain import Limits, verdict_of
from agpt.failover import classify, plan, policy
from agpt.watch import settings as watch

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "contract.md").read_text()


def _table(heading: str) -> list[list[str]]:
    """The rows of the first table after `heading` (cells stripped, header and rule dropped)."""
    text = DOC.split(heading, 1)[1]
    rows = []
    for line in text.splitlines():
        if line.startswith("|"):
            rows.append([c.strip().strip("`") for c in line.strip("|").split("|")])
        elif rows:
            break
    return rows[2:]


def test_exit_codes_match_errors_py() -> None:
    rows = {r[1]: int(r[0]) for r in _table("## Exit codes") if r[1]}
    consts = {k: v for k, v in vars(errors).items() if k.startswith("EXIT_")}
    assert rows == consts
    codes = {int(r[0]) for r in _table("## Exit codes") if r[0].isdigit()}
    assert {watch.EXIT_CANNOT_RUN, watch.EXIT_NOT_FOUND} <= codes


def test_verdict_table_matches_the_code() -> None:
    rows = {r[0]: int(r[1]) for r in _table("## Verdicts")}
    assert rows == rundir.VERDICT_EXIT
    for verdict, code in rows.items():
        assert verdict_of(code)[0] == verdict
        assert verdict_of(code)[1] == (verdict in ("failed", "resubmit", "idle"))
    assert verdict_of(143) == ("signal15", True)
    assert {v: rows[v] for v in ("done", "failed", "stuck", "repeat", "resubmit")} == policy.EXIT_CODES


def test_run_directory_files_are_the_code_names() -> None:
    block = DOC.split("## Run directory", 1)[1].split("```", 2)[1]
    documented = set(re.findall(r"[a-z_./]+(?:\.jsonl|\.lock|\.log|\.json)|hosts/[a-z.]+|chain\.lock", block))
    for name in (*rundir.RUN_FILES, rundir.HOSTS_LOCK):
        assert name in documented or name in block, name
    assert rundir.COMPLETE in block and f"{rundir.CKPT}/step-" in block
    assert f"{rundir.ATTEMPTS}/<jobid>.<n>.log" in block and ".class.json" in block


def test_progress_regex_and_margin_are_one_setting() -> None:
    assert f"`{rundir.PROGRESS_RE}`" in DOC
    assert classify.DEFAULT_PROGRESS_RE == plan.DEFAULT_PROGRESS_RE == watch.DEFAULT_PROGRESS_RE
    assert classify.DEFAULT_PROGRESS_RE == rundir.PROGRESS_RE
    assert classify.DEFAULT_MARGIN_S == rundir.WALLTIME_MARGIN_S
    assert classify.CLASSES == plan.CLASSES == rundir.CLASSES


def _bash_defaults(lib: str, names: list[str]) -> dict[str, str]:
    script = f"source {ROOT / 'lib' / lib}; " + "; ".join(f'printf "%s\\n" "${n}"' for n in names)
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True, env={})
    return dict(zip(names, out.stdout.splitlines(), strict=True))


def test_settings_defaults_are_one_fact_in_bash_python_and_the_contract() -> None:
    s = policy.Settings()
    limits = Limits()
    want = {
        "FAILOVER_MAX_ATTEMPTS": str(s.max_attempts),
        "FAILOVER_MAX_REPEAT": str(s.max_repeat),
        "FAILOVER_MAX_BLIND": str(s.max_blind),
        "FAILOVER_MIN_ATTEMPT_S": f"{s.min_attempt_s:g}",
        "FAILOVER_BACKOFF": " ".join(f"{b:g}" for b in s.backoff),
        "FAILOVER_PROGRESS_RE": rundir.PROGRESS_RE,
    }
    assert _bash_defaults("failover.sh", list(want)) == want
    chain = {"CHAIN_MAX_JOBS": str(limits.max_jobs), "CHAIN_MAX_NO_PROGRESS": str(limits.max_no_progress)}
    assert _bash_defaults("chain.sh", list(chain)) == chain
    rows = {r[0]: r[1] for r in _table("## Settings and their defaults")}
    assert rows == {**want, **chain, "FAILOVER_WALLTIME_MARGIN": f"{rundir.WALLTIME_MARGIN_S:g}"}


def test_no_reference_to_a_contract_outside_the_repository() -> None:
    # The name of the contract file that lives outside this repository, spelled so that this guard is not
    # itself a reference to it; the repository's own contract is docs/contract.md.
    outside = "CONTRACT" + ".md"
    for folder in ("python", "lib", "bin", "tests", "jobs", "site"):
        for f in (ROOT / folder).rglob("*"):
            if (
                f.is_file()
                and f.suffix in ("", ".py", ".sh", ".bats", ".bash", ".md")
                and f != Path(__file__)
            ):
                assert outside not in f.read_text(errors="replace"), f
    assert outside not in (ROOT / "README.md").read_text()


def test_observability_settings_files_and_metrics_are_the_code() -> None:
    import dataclasses

    from agpt import progress
    from agpt.observe import markers, prom
    from agpt.train.config import ObserveConfig

    def shown(v: object) -> str:
        return str(v).lower() if isinstance(v, bool) else f"{v:g}" if isinstance(v, float) else str(v)

    rows = {r[0]: r[1] for r in _table("### Trainer config section `observe`")}
    oc = ObserveConfig()
    assert rows == {f"observe.{f.name}": shown(getattr(oc, f.name)) for f in dataclasses.fields(oc)}
    metrics = {r[0]: r[1] for r in _table("### `RUN_DIR/metrics.prom`")}
    assert metrics == {name: kind for name, (kind, _help) in prom.METRICS.items()}
    block = DOC.split("## Run directory", 1)[1].split("```", 2)[1]
    for name in (
        rundir.METRICS,
        rundir.PROM,
        f"{rundir.TB}/events.out.tfevents.",
        f"{rundir.TB}/{markers.STATE}",
    ):
        assert name in block, name
    assert f"`{progress.EVERY_ENV}` (default {progress.EVERY_DEFAULT:g})" in DOC


def test_eval_keys_files_events_and_chain_settings_are_the_codes() -> None:
    import dataclasses

    from agpt.evals import due, records
    from agpt.train.config import EvalConfig
    from agpt.train.health import EVENTS

    section = DOC.split("### Validation: `eval.*`", 1)[1].split("\n\n", 2)[1]
    documented = {}
    for line in section.splitlines():
        cells = line.strip("|").split("|")
        if len(cells) > 1 and cells[0].strip().startswith("`eval."):
            documented[cells[0].strip().strip("`")] = re.findall(r"`([^`]*)`", cells[1])[0]
    for f in dataclasses.fields(EvalConfig):
        value = getattr(EvalConfig(), f.name)
        want = '""' if value == "" else "[]" if value == [] else str(value)
        assert documented.get(f"eval.{f.name}") == want, f.name
    block = DOC.split("## Run directory", 1)[1].split("```", 2)[1]
    assert records.FILE in block and due.STATE in block and rundir.EVAL_HOLD in block
    assert EVENTS in DOC and "| `eval_regression` |" in DOC
    rows = {r[0]: r[1] for r in _table("### Settings (lib/chain.sh)")}
    bash = _bash_defaults("chain.sh", list(rows))
    assert {k: v.strip('"') for k, v in rows.items()} == bash
