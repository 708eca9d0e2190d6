"""docs/contract.md says what the code does: exit codes, verdicts, run-directory files, settings' defaults."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from agpt import errors, rundir
from agpt.chain import Limits, verdict_of
from agpt.failover import classify, plan, policy, sweep
from agpt.sim import model as sim_model
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
        "FAILOVER_MIN_SAVE_S": f"{s.min_save_s:g}",
        "FAILOVER_BACKOFF": " ".join(f"{b:g}" for b in s.backoff),
        "FAILOVER_PROGRESS_RE": rundir.PROGRESS_RE,
    }
    want["FAILOVER_MIN_NODES"] = s.min_nodes
    assert _bash_defaults("failover.sh", list(want) + list(WATCHDOG)) == {**want, **WATCHDOG}
    # FAILOVER_SHRINK is empty when sourced: the site profile (SITE_FAILOVER_SHRINK), sourced later, decides.
    assert _bash_defaults("failover.sh", ["FAILOVER_SHRINK"]) == {"FAILOVER_SHRINK": ""}
    chain = {"CHAIN_MAX_JOBS": str(limits.max_jobs), "CHAIN_MAX_NO_PROGRESS": str(limits.max_no_progress)}
    assert _bash_defaults("chain.sh", list(chain)) == chain
    rows = {r[0]: r[1] for r in _table("## Settings and their defaults")}
    assert rows == {**want, **WATCHDOG, **chain, "FAILOVER_WALLTIME_MARGIN": f"{rundir.WALLTIME_MARGIN_S:g}",
                    "FAILOVER_SHRINK": str(int(s.shrink))}  # fmt: skip


# The watchdog settings lib/failover.sh hands `agpt watch`, as Python states them.
WATCHDOG = {
    "FAILOVER_IDLE_TIMEOUT": f"{rundir.IDLE_TIMEOUT_S:g}",
    "FAILOVER_STARTUP_TIMEOUT": f"{rundir.STARTUP_TIMEOUT_S:g}",
    "FAILOVER_GRACE": f"{rundir.GRACE_S:g}",
    "FAILOVER_KILL_ON_EVIDENCE": str(int(watch.KILL_ON_EVIDENCE)),
}
SIM_MODELS = sorted((ROOT / "python" / "agpt" / "sim" / "models").glob("*.yaml"))
# `key: value  # jobs/configs/X.yaml SECTION.KEY` or `# lib/failover.sh FAILOVER_X default`: a value a model cites.
_CITED = re.compile(
    r"^\s*(?P<key>\w+):\s*(?P<value>[^#\s]+)\s*#\s*(?:(?P<config>jobs/configs/[\w.-]+\.yaml) (?P<field>[\w.]+)"
    r"|lib/failover\.sh (?P<setting>FAILOVER_\w+) default)",
    re.M,
)


# `jobs/configs/X.yaml SECTION.KEY VALUE` anywhere in a comment: the config's value, as it is written there.
_QUOTED = re.compile(
    r"(?P<config>jobs/configs/[\w.-]+\.yaml)\s+#?\s*(?P<field>[a-z_]+\.[\w.]+) (?P<value>\w+(?:[.:]\w+)*)"
)


def _config_raw(config: str, dotted: str) -> Any:
    value: Any = yaml.safe_load((ROOT / config).read_text())
    for part in dotted.split("."):
        value = value[part]
    return value


def _config_value(config: str, dotted: str) -> Any:
    """A config's value in the model's units: job.walltime in hours."""
    value = _config_raw(config, dotted)
    if isinstance(value, str) and re.fullmatch(r"\d+:\d\d:\d\d", value):
        h, m, sec = (int(x) for x in value.split(":"))
        return h + m / 60 + sec / 3600
    return value


@pytest.mark.parametrize("path", SIM_MODELS, ids=lambda p: p.stem)
def test_the_simulators_models_hold_the_values_they_cite(path: Path) -> None:
    """A fault model that says it uses the loop's or the chain's defaults gets them from the code; a value it
    cites from a job config or lib/failover.sh is that value (aurora-20b's step time once cited a batch the
    20B config no longer had)."""
    text = path.read_text()
    m = sim_model.load(path)
    for section, default in (("failover", sim_model.Failover()), ("chain", sim_model.Chain())):
        if re.search(rf"^{section}:\s*# lib/\w+\.sh defaults", text, re.M):
            assert getattr(m, section) == default, f"{path.name}: {section}"
    assert sim_model.Failover().backoff == list(policy.Settings().backoff)
    assert (sim_model.Chain().max_jobs, sim_model.Chain().max_no_progress) == (Limits().max_jobs, 2)
    cited = list(_CITED.finditer(text))
    assert cited or path.stem == "chaos", f"{path.name}: cites nothing"
    for c in cited:
        where = f"{path.name}: {c['key']}: {c['value']}"
        if c["setting"] == "FAILOVER_SPARES":
            spares = re.search(r"\((\d+) at (\d+)\)", text[c.start() :].split("\n", 1)[0])
            assert spares is not None, where
            fallback = {"percent": rundir.SPARES_PERCENT, "minimum": rundir.SPARES_MIN}
            assert rundir.spares_for(int(spares[2]), **fallback) == int(spares[1]), where  # type: ignore[arg-type]
        elif c["setting"] == "FAILOVER_SWEEP":  # a model's `sweep: true` is the loop's default mode, on
            assert yaml.safe_load(c["value"]) is (sweep.SweepSettings().mode != "off"), where
        elif c["setting"]:
            cites = {**WATCHDOG, "FAILOVER_SWEEP_TIMEOUT": f"{sweep.DEFAULT_TIMEOUT_S:g}"}
            assert f"{float(c['value']):g}" == cites[c["setting"]], where
        else:
            assert yaml.safe_load(c["value"]) == _config_value(c["config"], c["field"]), where
    for q in _QUOTED.finditer(text):
        got = _config_raw(q["config"], q["field"])
        assert got == (q["value"] if isinstance(got, str) else yaml.safe_load(q["value"])), q.group(0)
    assert any(q["field"] == "train.global_batch" for q in _QUOTED.finditer(text)) or path.stem == "chaos"


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


def test_health_sweep_settings_are_the_code_defaults() -> None:
    rows = {r[0]: r[1] for r in _table("### Settings (lib/failover.sh; `agpt failover plan --sweep* ...`)")}
    d = sweep.SweepSettings()
    assert rows["FAILOVER_SWEEP_TIMEOUT"] == f"{d.timeout:g}"
    assert rows["FAILOVER_SWEEP_MAX_EVICT"] == str(d.max_evict)
    assert rows["FAILOVER_SWEEP_MIN_FREE_MIB"] == f"{d.min_free_mib:g}"
    assert rows["FAILOVER_SWEEP"].endswith(d.mode) and " | ".join(sweep.MODES) in DOC
    bash = {"FAILOVER_SWEEP_TIMEOUT": f"{d.timeout:g}", "FAILOVER_SWEEP_MAX_EVICT": str(d.max_evict),
            "FAILOVER_SWEEP_MIN_FREE_MIB": f"{d.min_free_mib:g}"}  # fmt: skip
    assert _bash_defaults("failover.sh", list(bash)) == bash


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
