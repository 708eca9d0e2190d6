"""`agpt failover classify`: the corpus of real-looking attempt logs, every pattern's examples, host spellings,
bounded streaming, and the promise that a scraper error never escapes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agpt.errors import BadInput
from agpt.failover import classify as cl
from agpt.failover import patterns as pat
from agpt.failover.decide import EVIDENCE_CHARS, Classification
from agpt.failover.evidence import Evidence
from agpt.failover.hostmatch import HostMatcher, host_key, parse_hosts
from agpt.hostlist import expand_hostlist
from failover_util import case_args, failover_cli, site_pattern_set

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fixtures" / "logs"
CASES = sorted(CORPUS.glob("*/*.json"))
ALL_PATTERNS = pat.load(pat.DEFAULT_SETS)


def run_cli(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The command as the failover loop runs it: bin/agpt-failover under a plain, isolated python3."""
    return failover_cli("classify", *args, env=env)


# --- the corpus ------------------------------------------------------------------------------------------------
def test_corpus_is_big_and_covers_the_sites() -> None:
    assert len(CASES) >= 40
    sites = {p.parent.name for p in CASES}
    assert {"aurora", "polaris", "perlmutter", "frontier", "generic"} <= sites
    for p in CASES:
        assert p.with_suffix(".log").is_file(), p


@pytest.mark.parametrize("case_path", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_corpus_case(case_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = json.loads(case_path.read_text())
    args = case_args(case, tmp_path)
    assert cl.main([*args, str(case_path.with_suffix(".log"))]) == 0
    out = json.loads(capsys.readouterr().out)
    exp = case["expect"]
    assert out["class"] == exp["class"], (case["description"], out)
    assert out["bad_hosts"] == exp["bad_hosts"], out
    if "last_step" in exp:
        assert out["last_step"] == exp["last_step"]
    if "suspect_first" in exp:
        assert out["suspect_hosts"][:1] == [exp["suspect_first"]], out
    if "not_suspect" in exp:
        assert exp["not_suspect"] not in out["suspect_hosts"]
    if "pattern" in exp:
        assert exp["pattern"] in {m["pattern"] for m in out["matches"]}, out["matches"]
    if "note" in exp:
        assert any(exp["note"] in n for n in out["notes"]), out["notes"]
    hosts = set(parse_hosts((case.get("hostfile_text") or "\n".join(case["hosts"])).splitlines()))
    assert set(out["bad_hosts"]) <= hosts and set(out["suspect_hosts"]) <= hosts
    assert out["class"] in cl.CLASSES
    if out["class"] in ("node", "system", "app"):
        assert out["evidence"], out


# --- the patterns: data with examples ------------------------------------------------------------------------
@pytest.mark.parametrize("p", ALL_PATTERNS, ids=lambda p: p.id)
def test_pattern_examples(p: pat.Pattern) -> None:
    """Every pattern matches its positive lines (capturing the expected host and rank) and none of its negatives."""
    assert p.id.startswith(p.set_name + "."), "ids are SET.name"
    assert p.description, "every pattern says why its lines mean what its class says"
    assert p.needles, "a pattern needs a literal so big logs are prefiltered"
    assert pat.check([p]) == []


def test_pattern_check_names_a_sites_broken_example(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    bad = {
        "id": "mysite.gpu",
        "class": "node",
        "regex": r"GPU (?P<host>\S+) is dead",
        "description": "x",
        "positive": [{"line": "GPU n3 is dead", "host": "n4"}, "GPU is dead"],
        "negative": ["GPU n3 is dead again"],
    }
    (site / "mysite.json").write_text(json.dumps({"set": "mysite", "patterns": [bad]}))
    r = subprocess.run(
        [sys.executable, "-m", "agpt.failover.patterns", "--sets", "mysite"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "python"), "FAILOVER_PATTERN_PATH": str(site)},
        timeout=60,
    )
    assert r.returncode == 1, r.stderr
    assert "captured host 'n3', expected 'n4'" in r.stdout
    assert "does not match its positive example 'GPU is dead'" in r.stdout
    assert "matches its negative example 'GPU n3 is dead again'" in r.stdout


def test_pattern_sets_are_the_documented_ones() -> None:
    assert {p.set_name for p in ALL_PATTERNS} == set(pat.DEFAULT_SETS)
    assert len({p.id for p in ALL_PATTERNS}) == len(ALL_PATTERNS)


def test_a_site_adds_a_pattern_as_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    site = site_pattern_set(tmp_path / "site", "mysite", "mysite.bmc", "node", r"BMC reports node (?P<host>\S+) overheated",
                            "BMC reports node n3 overheated", "BMC reports node n3 ok", "the site's BMC watcher")  # fmt: skip
    (tmp_path / "hosts").write_text("n1\nn2\nn3\n")
    (tmp_path / "log").write_text("step=4\nBMC reports node n3 overheated\n")
    env = {"FAILOVER_PATTERN_PATH": str(site), "FAILOVER_PATTERN_SETS": "srun,mysite"}
    r = run_cli(["--rc", "1", "--hostfile", str(tmp_path / "hosts"), str(tmp_path / "log")], env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["class"] == "node" and out["bad_hosts"] == ["n3"]
    assert out["pattern_sets"] == ["srun", "mysite"]


def test_pattern_sets_selected_by_flag_and_env(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "hosts").write_text("nid001234\nnid001235\n")
    log = tmp_path / "log"
    log.write_text("srun: error: Node failure on nid001235\n")
    base = ["--rc", "1", "--hostfile", str(tmp_path / "hosts")]
    assert cl.main([*base, "--patterns", "cuda,app", str(log)]) == 0
    assert json.loads(capsys.readouterr().out)["class"] == "crash"  # srun set not chosen: no evidence
    assert cl.main([*base, "--patterns", "srun level-zero", str(log)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bad_hosts"] == ["nid001235"] and out["pattern_sets"] == ["srun", "level_zero"]
    r = run_cli([*base, str(log)], {"FAILOVER_PATTERN_SETS": "cuda rocm"})
    assert json.loads(r.stdout)["pattern_sets"] == ["cuda", "rocm"]
    r = run_cli([*base, str(log)], {"FAILOVER_PATTERN_SETS": "cuda,bogus"})
    assert r.returncode == 2 and "FAILOVER_PATTERN_SETS" in r.stderr and "bogus" in r.stderr


# --- host names --------------------------------------------------------------------------------------------
def test_host_spellings_map_to_the_hostfile() -> None:
    m = HostMatcher(
        hosts=["x4102c5s2b0n0.hostmgmt2102.cm.aurora.alcf.anl.gov", "nid001234", "frontier01234"],
        ipmap=[("10.1.0.7", "nid001234-hsn0"), ("10.9.9.9", "login01")],
    )
    aurora = "x4102c5s2b0n0.hostmgmt2102.cm.aurora.alcf.anl.gov"
    assert m.match("x4102c5s2b0n0") == aurora
    assert m.match("X4102C5S2B0N0.") == aurora
    assert m.match("x4102c5s2b0n0h0") == aurora  # the node's NIC xname
    assert m.match("nid001234-hsn0") == "nid001234"
    assert m.match("nid001234-hsn0.chn.perlmutter.nersc.gov<52010>") == "nid001234"
    assert m.match("frontier01234.frontier.olcf.ornl.gov") == "frontier01234"
    assert m.match("10.1.0.7") == "nid001234"
    assert m.match("[10.1.0.7]:29500") == "nid001234"
    assert m.match("10.1.0.7<43222>") == "nid001234"
    for outsider in ("nid001235", "10.9.9.9", "10.1.0.8", "login01", "x4102c5s2b0", ""):
        assert m.match(outsider) is None, outsider
    assert m.match_all("nid[001233-001235]") == ["nid001234"]


def test_an_address_two_hosts_share_names_no_one() -> None:
    m = HostMatcher(hosts=["n1", "n2"], ipmap=[("127.0.0.1", "n1"), ("127.0.0.1", "n2"), ("10.0.0.2", "n2")])
    assert m.match("127.0.0.1") is None
    assert m.match("10.0.0.2") == "n2"


def test_hostlist_and_keys() -> None:
    assert expand_hostlist("nid[001-003,007]") == ["nid001", "nid002", "nid003", "nid007"]
    assert expand_hostlist("a,b[1-2]") == ["a", "b1", "b2"]
    assert len(expand_hostlist("n[0-99999999]")) <= 65536
    assert host_key("x3006c0s13b1n0.hsn.cm.polaris.alcf.anl.gov") == "x3006c0s13b1n0"
    assert host_key("nid001234-hsn3") == "nid001234"


def test_hostfile_dedupes_and_ignores_comments() -> None:
    text = "# nodes\n\nnid1 slots=4\nnid2:4\nnid1\n  nid2  \nnid1-hsn0\nnid3 # spare\n"
    assert parse_hosts(text.splitlines()) == ["nid1", "nid2", "nid3"]


def test_names_outside_the_job_are_never_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "hosts").write_text("nid001234\nnid001235\n")
    log = tmp_path / "log"
    log.write_text(
        "srun: error: Node failure on nid009999\nnid001299: RuntimeError: No CUDA GPUs are available\n"
    )
    assert cl.main(["--rc", "1", "--hostfile", str(tmp_path / "hosts"), str(log)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bad_hosts"] == [] and out["class"] == "crash"
    assert "nid009999" not in json.dumps(out["suspect_hosts"]) and "nid001299" not in out["suspect_hosts"]
    assert any("nid009999" in n and "not a host of this job" in n for n in out["notes"])


# --- the rules ----------------------------------------------------------------------------------------------
def _classify(tmp_path: Path, text: str, rc: int, **kw: object) -> Classification:
    log = tmp_path / "attempt.log"
    log.write_text(text)
    hosts = kw.pop("hosts", ["n1", "n2", "n3", "n4"])
    return cl.classify(log, rc, hosts, **kw)  # type: ignore[arg-type]


def test_walltime_only_by_the_clock(tmp_path: Path) -> None:
    text = "step=10\nTerminated\n"
    assert _classify(tmp_path, text, 143).cls == "crash"
    assert _classify(tmp_path, text, 143, deadline=1000.0, now=100.0).cls == "crash"
    assert _classify(tmp_path, text, 143, deadline=1000.0, now=900.0).cls == "walltime"
    assert _classify(tmp_path, text, 143, deadline=1000.0, now=900.0, margin_s=60.0).cls == "crash"
    assert _classify(tmp_path, text, 1, deadline=1000.0, now=1010.0).cls == "walltime"
    assert _classify(tmp_path, text, 0, deadline=1000.0, now=1010.0).cls == "success"


def test_watchdog_reads_the_log(tmp_path: Path) -> None:
    r = _classify(tmp_path, "step=3\nsrun: error: Node failure on n2\n", 124)
    assert (r.cls, r.bad_hosts) == ("node", ["n2"])
    r = _classify(tmp_path, "step=3\nstep=4\n", 124)
    assert (r.cls, r.bad_hosts, r.last_step, r.first_step) == ("hang", [], 4, 3)


def test_first_failing_host_leads_the_suspects(tmp_path: Path) -> None:
    """Exit notices in log order, then the first killed rank; the cascade is never evidence."""
    text = (
        "srun: error: n3: task 5: Exited with exit code 1\n"
        "srun: error: n1: task 0: Segmentation fault\n"
        "srun: error: n2: tasks 2-3: Terminated\n"
    )
    r = _classify(tmp_path, text, 1)
    assert r.cls == "crash" and r.suspect_hosts == ["n3", "n1", "n2"]  # the killed follower last
    assert r.rank_hosts == {5: "n3", 0: "n1", 2: "n2"}


def test_progress_regex_from_env_and_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = "iter 10 | loss 3\niter 11 | loss 3\nstep=5\n"
    assert _classify(tmp_path, text, 1).last_step == 5
    monkeypatch.setenv("FAILOVER_PROGRESS_RE", r"^iter (\d+)")
    assert _classify(tmp_path, text, 1).last_step == 11
    assert _classify(tmp_path, text, 1, progress_re=r"step=(?P<step>\d+)").last_step == 5
    monkeypatch.setenv("FAILOVER_PROGRESS_RE", "(")
    with pytest.raises(BadInput, match="FAILOVER_PROGRESS_RE"):
        _classify(tmp_path, text, 1)


def test_scraper_error_degrades_to_no_evidence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(self: object, *args: object) -> None:
        raise RuntimeError("regex engine on fire")

    monkeypatch.setattr(Evidence, "line", boom)
    r = _classify(tmp_path, "step=7\nsrun: error: Node failure on n2\n", 1)
    assert (r.cls, r.bad_hosts, r.evidence) == ("crash", [], [])
    assert any("scraper error" in n and "regex engine on fire" in n for n in r.notes)
    assert r.last_step is None or r.last_step == 7


def test_broken_pattern_file_degrades_through_the_cli(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "srun.json").write_text("{ not json")
    (tmp_path / "hosts").write_text("n1\nn2\n")
    (tmp_path / "log").write_text("step=9\nsrun: error: Node failure on n2\n")
    r = run_cli(
        ["--rc", "124", "--hostfile", str(tmp_path / "hosts"), str(tmp_path / "log")],
        {"FAILOVER_PATTERN_PATH": str(site)},
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["class"] == "hang" and out["bad_hosts"] == [] and out["last_step"] == 9
    assert any("scraper error" in n for n in out["notes"])


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--rc", "x"], "--rc"),
        (["--rc", "300"], "--rc"),
        (["--rc", "1", "--deadline", "soon"], "--deadline"),
        (["--rc", "1", "--walltime-margin", "-5"], "--walltime-margin"),
        (["--rc", "1", "--patterns", "nope"], "nope"),
        (["--rc", "1", "--max-mb", "-1"], "--max-mb"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    (tmp_path / "hosts").write_text("n1\n")
    (tmp_path / "log").write_text("step=1\n")
    r = run_cli([*args, "--hostfile", str(tmp_path / "hosts"), str(tmp_path / "log")])
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr


def test_a_missing_ipmap_costs_only_the_addresses(tmp_path: Path) -> None:
    (tmp_path / "hosts").write_text("n1\nn2\n")
    (tmp_path / "log").write_text("srun: error: Node failure on n2\n")
    r = run_cli(
        [
            "--rc",
            "1",
            "--hostfile",
            str(tmp_path / "hosts"),
            "--ipmap",
            "/nonexistent/ip",
            str(tmp_path / "log"),
        ]
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["bad_hosts"] == ["n2"] and "/nonexistent/ip" in out["notes"][0]


def test_missing_log_and_hostfile_exit_2(tmp_path: Path) -> None:
    (tmp_path / "hosts").write_text("n1\n")
    (tmp_path / "log").write_text("x\n")
    r = run_cli(["--rc", "1", "--hostfile", str(tmp_path / "hosts"), str(tmp_path / "nolog")])
    assert r.returncode == 2 and "nolog" in r.stderr and len(r.stderr.splitlines()) == 1
    r = run_cli(["--rc", "1", "--hostfile", str(tmp_path / "nohosts"), str(tmp_path / "log")])
    assert r.returncode == 2 and "nohosts" in r.stderr and len(r.stderr.splitlines()) == 1
    r = run_cli(["--hostfile", str(tmp_path / "hosts"), str(tmp_path / "log")])
    assert r.returncode == 2 and "--rc" in r.stderr


# --- big and dirty logs ------------------------------------------------------------------------------------
def test_streams_a_big_log_in_bounded_memory(tmp_path: Path) -> None:
    """~48 MB of NCCL chatter, progress and one huge line: classified, memory stays bounded."""
    log = tmp_path / "big.log"
    block = "".join(
        (
            f"{i % 4}: nid00123{i % 4}:81234:81234 [0] NCCL INFO Channel 00/02 : 0[0] -> 1[1] via P2P/IPC\n"
            if i % 50 == 0
            else ""
        )
        + f"0: step={i} loss=2.{i % 97:04d} grad_norm=0.41 lr=2.9e-04 tps=5120.3 stall_ms=0.0 tokens=123456789\n"
        for i in range(4000)
    ).encode()
    with log.open("wb") as f:
        f.write(b"3: nid001233:1:1 [0] NCCL INFO comm 0x1 rank 3 nranks 4 - Init COMPLETE\n")
        for _ in range(100):
            f.write(block)
        f.write(b"A" * (3 << 20))  # a 3 MB line without a newline in sight
        f.write(b"\n3: [rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n")
    assert log.stat().st_size > 36 << 20
    (tmp_path / "hosts").write_text("nid001230\nnid001231\nnid001232\nnid001233\n")
    code = (
        # VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the forking parent (pytest, with torch
        # loaded by earlier tests), while VmHWM is this process's own peak.
        "import json, re, sys; sys.path.insert(0, sys.argv[1]); "
        "from agpt.failover import classify as cl; "
        "r = cl.classify(sys.argv[2], 1, ['nid001230','nid001231','nid001232','nid001233']); "
        "print(json.dumps({'cls': r.cls, 'bad': r.bad_hosts, 'step': r.last_step, 'lines': r.lines, "
        "'rss_kb': int(re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read()).group(1))}))"
    )
    r = subprocess.run(
        [sys.executable, "-I", "-c", code, str(ROOT / "python"), str(log)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["cls"] == "node" and out["bad"] == ["nid001233"] and out["step"] == 3999
    assert out["rss_kb"] < 80 * 1024, f"peak RSS {out['rss_kb']} KiB for a {log.stat().st_size >> 20} MiB log"


def test_long_lines_and_bad_bytes(tmp_path: Path) -> None:
    line = b"x" * 100_000 + b" srun: error: Node failure on n2\n"
    log = tmp_path / "l.log"
    log.write_bytes(b"\xff\xfe step=1\n" + line + b"\x80\x81 srun: error: Node failure on n3\n")
    r = cl.classify(log, 1, ["n1", "n2", "n3"])
    assert r.bad_hosts == ["n3"]  # the 100 kB line is cut to its head: what it hides is not read
    assert all(len(e) <= EVIDENCE_CHARS for e in r.evidence)


def test_a_log_past_the_limit_is_read_by_its_head_and_tail(tmp_path: Path) -> None:
    """Bounded time as well as memory: the middle of a huge log is skipped, and the note says so."""
    log = tmp_path / "huge.log"
    filler = b"".join(
        b"0: step=%d loss=2.5 grad_norm=0.4 lr=3e-4 tps=5000.0 stall_ms=0.0\n" % i for i in range(2, 20000)
    )
    with log.open("wb") as f:
        f.write(b"3: n4:81234:81234 [0] NCCL INFO Bootstrap : Using hsn0\nstep=1 loss=3\n")
        f.write(filler * 2)
        f.write(b"srun: error: Node failure on n2\n")  # the middle: skipped
        f.write(filler * 2)
        f.write(b"3: [rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n")
    r = cl.classify(log, 1, ["n1", "n2", "n3", "n4"], max_mb=1.0)
    assert (r.cls, r.bad_hosts, r.first_step, r.last_step) == ("node", ["n4"], 1, 19999)
    assert any("read its first" in n for n in r.notes)
    whole = cl.classify(log, 1, ["n1", "n2", "n3", "n4"], max_mb=0)
    assert whole.bad_hosts == ["n2", "n4"] and not any("read its first" in n for n in whole.notes)


def test_the_benchmark_runs() -> None:
    r = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "bench" / "bench_classify.py"), "--mb", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "ratio classify/baseline" in r.stdout


# --- real srun output (the local Slurm cluster) ----------------------------------------------------------------
RANK_SCRIPT = r"""
echo "rank=$SLURM_PROCID host=$SLURMD_NODENAME"
echo "step=$((10 + SLURM_PROCID))"
if [ "$SLURM_PROCID" = "$FAULT_RANK" ]; then
  sleep 2  # let srun's I/O forwarding carry every rank's first lines before the step is killed
  case "$FAULT" in
    ecc) echo "[rank$SLURM_PROCID]: RuntimeError: CUDA error: uncorrectable ECC error encountered"; exit 1 ;;
    segv) kill -SEGV $$ ;;
  esac
fi
sleep 30
"""


@pytest.mark.cluster
@pytest.mark.parametrize(("fault", "cls"), [("ecc", "node"), ("segv", "crash")])
def test_real_srun_output(cluster: dict[str, str], tmp_path: Path, fault: str, cls: str) -> None:
    """What srun --label really prints when one task fails: the failing task's node is found, the rest ignored."""
    nodes = ["n1", "n2", "n3", "n4"]
    log = tmp_path / "attempt.log"
    env = {**os.environ, **cluster, "FAULT": fault, "FAULT_RANK": "2"}
    with log.open("wb") as out:
        srun = [
            "srun",
            "--label",
            "--kill-on-bad-exit=1",
            "-N",
            "4",
            "--ntasks-per-node=1",
            "-w",
            ",".join(nodes),
        ]
        proc = subprocess.run(
            [*srun, "bash", "-c", RANK_SCRIPT],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
            timeout=120,
        )
    text = log.read_text(errors="replace")
    assert proc.returncode != 0, text
    guilty = re.search(r"^\s*2: rank=2 host=(\S+)$", text, re.MULTILINE)
    assert guilty, text
    (tmp_path / "hosts").write_text("\n".join(nodes) + "\n")
    r = run_cli(["--rc", str(proc.returncode), "--hostfile", str(tmp_path / "hosts"), str(log)])
    out = json.loads(r.stdout)
    assert out["class"] == cls, (out, text)
    if cls == "node":
        assert out["bad_hosts"] == [guilty.group(1)], (out, text)
    else:
        assert out["bad_hosts"] == [] and out["suspect_hosts"][:1] == [guilty.group(1)], (out, text)
    assert out["rank_hosts"]["2"] == guilty.group(1)


def test_walltime_margin_from_env_and_flag(tmp_path: Path) -> None:
    (tmp_path / "hosts").write_text("n1\n")
    (tmp_path / "log").write_text("step=1\nTerminated\n")
    base = ["--rc", "143", "--hostfile", str(tmp_path / "hosts"), "--deadline", "10000", "--now", "9700"]
    assert json.loads(run_cli([*base, str(tmp_path / "log")]).stdout)["class"] == "crash"  # 300 s > 120 s
    out = run_cli([*base, str(tmp_path / "log")], {"FAILOVER_WALLTIME_MARGIN": "600"})
    assert json.loads(out.stdout)["class"] == "walltime"
    out = run_cli(
        [*base, "--walltime-margin", "301", str(tmp_path / "log")], {"FAILOVER_WALLTIME_MARGIN": "10"}
    )
    assert json.loads(out.stdout)["class"] == "walltime"
    out = run_cli(
        [*base[:-2], "--deadline", "", str(tmp_path / "log")]
    )  # an unknown deadline: never walltime
    assert json.loads(out.stdout)["class"] == "crash"


def test_an_oom_kill_alone_is_the_first_guess(tmp_path: Path) -> None:
    r = _classify(
        tmp_path, "step=9\nsrun: error: n4: task 7: Killed\nsrun: error: n1: tasks 0-1: Killed\n", 137
    )
    assert (r.cls, r.bad_hosts, r.evidence, r.suspect_hosts) == ("crash", [], [], ["n4"])
