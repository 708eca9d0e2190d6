"""`agpt failover classify` on what each launcher really prints: the label-format matrix (one case per launcher and
labelling option), launcher daemons that die or report a death, evidence that names only an address, node-class
evidence placed through the rank->host map, service faults, the same fault everywhere, and the pattern sources."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agpt.failover import classify as cl
from agpt.failover import patterns as pat
from agpt.failover.decide import Classification
from agpt.failover.hostmatch import HostMatcher
from agpt.failover.labels import TRAINING_RANK, split_all, split_labels
from failover_util import site_pattern_set

ROOT = Path(__file__).resolve().parents[2]
FQDN = [f"x4102c5s{i}b0n0.hostmgmt2102.cm.aurora.alcf.anl.gov" for i in range(2, 6)]
HOSTS = ["n1", "n2", "n3", "n4"]
ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"


def _classify(tmp_path: Path, text: str, rc: int = 1, **kw: object) -> Classification:
    log = tmp_path / "attempt.log"
    log.write_text(text)
    hosts = kw.pop("hosts", HOSTS)
    return cl.classify(log, rc, hosts, **kw)  # type: ignore[arg-type]


# --- the label-format matrix: launcher, option, the exact prefix -> (host, rank) ----------------------------
MATRIX = [
    # launcher / option                        prefix                                           host      rank
    ("PALS mpiexec --label (rank)", "3: ", None, 3),
    ("PALS mpiexec --label (host: rank:)", f"{FQDN[1]}: 3: ", FQDN[1], 3),
    ("PALS mpiexec --label (FQDN rank:)", f"{FQDN[1]} 3: ", FQDN[1], 3),
    ("PALS mpiexec --label --line-buffer", "3: ", None, 3),
    ("PALS host prefix, short name", "x4102c5s3b0n0: ", FQDN[1], None),
    ("hydra -l", "[3] ", None, 3),
    ("hydra -prepend-rank", "[3] ", None, 3),
    ("hydra -prepend-pattern '[%r@%h] '", f"[3@{FQDN[1]}] ", FQDN[1], 3),
    ("hydra -prepend-pattern '[%h@%r] '", "[x4102c5s3b0n0@3] ", FQDN[1], 3),
    ("hydra -prepend-pattern '[%h] '", "[x4102c5s3b0n0] ", FQDN[1], None),
    ("hydra proxy daemon", "[proxy:0:1@x4102c5s3b0n0] ", FQDN[1], None),
    ("srun --label", "3: ", None, 3),
    ("srun --label, padded (>= 10 tasks)", " 3: ", None, 3),
    ("srun plain", "", None, None),
    ("slurmstepd on a node", "slurmstepd-x4102c5s3b0n0: ", FQDN[1], None),
    ("Open MPI 4 --tag-output", "[1,3]<stderr>:", None, 3),
    ("Open MPI 5 --output tag", "[prterun-login1-81234@1,3]<stderr>: ", None, 3),
    (
        "Open MPI 5 --output tag-detailed",
        "[prterun-login1-81234@1,3][x4102c5s3b0n0:5123]<stderr>: ",
        FQDN[1],
        3,
    ),
    ("Open MPI --timestamp-output", "[Tue Dec  1 04:10:58 2026]<stderr>: ", None, None),
    ("Open MPI [host:pid]", "[x4102c5s3b0n0:5123] ", FQDN[1], None),
    ("horovodrun", "[3]<stderr>:", None, 3),
    ("torch.distributed [rankN]:", "[rank3]: ", None, 3),
    ("torchrun --tee (local rank only)", "[default1]:", None, None),
    ("NCCL/RCCL host:pid:tid [dev]", "x4102c5s3b0n0:81234:81301 [1] ", FQDN[1], None),
    ("pdsh / DeepSpeed pdsh runner", "x4102c5s3b0n0: ", FQDN[1], None),
    ("DeepSpeed pdsh + torch rank", "x4102c5s3b0n0: [rank3]: ", FQDN[1], 3),
]


@pytest.mark.parametrize(("option", "prefix", "host", "rank"), MATRIX, ids=[m[0] for m in MATRIX])
def test_label_matrix(option: str, prefix: str, host: str | None, rank: int | None) -> None:
    body, h, r, t = split_all(prefix + ECC, HostMatcher(hosts=FQDN))
    assert (body, h, r if r is not None else t) == (ECC, host, rank), option
    # a trainer's own [rankN] is its rank, kept apart from a launcher's task id (docs/contract.md)
    assert (t is not None) == ("[rank" in prefix), option
    _, _, combined = split_labels(prefix + ECC, HostMatcher(hosts=FQDN))
    assert combined == (r if r is not None else None if t is None else TRAINING_RANK + t), option


def test_a_label_naming_a_host_outside_the_job_is_not_taken_as_a_host() -> None:
    body, h, r = split_labels("[3@nid009999] " + ECC, HostMatcher(hosts=FQDN))
    assert (h, r) == (None, None) and body.endswith(ECC)


@pytest.mark.parametrize(
    ("option", "prefix"),
    [(m[0], m[1]) for m in MATRIX if m[2] is not None],
    ids=[m[0] for m in MATRIX if m[2] is not None],
)
def test_node_evidence_under_each_host_label_names_the_host(tmp_path: Path, option: str, prefix: str) -> None:
    r = _classify(tmp_path, f"step=10\n{prefix}{ECC}\n", hosts=FQDN)
    assert (r.cls, r.bad_hosts) == ("node", [FQDN[1]]), option


@pytest.mark.parametrize(
    ("option", "prefix"),
    [(m[0], m[1]) for m in MATRIX if m[2] is None and m[3] is not None],
    ids=[m[0] for m in MATRIX if m[2] is None and m[3] is not None],
)
def test_node_evidence_under_each_rank_label_is_placed_by_the_rank_map(
    tmp_path: Path, option: str, prefix: str
) -> None:
    """The rank's host is learned from a line that is no failure at all (a PALS `FQDN RANK:` label)."""
    text = f"{FQDN[1]} 3: step=10 loss=2.5\n{FQDN[0]} 0: step=10 loss=2.5\n{prefix}{ECC}\n"
    r = _classify(tmp_path, text, hosts=FQDN)
    assert (r.cls, r.bad_hosts) == ("node", [FQDN[1]]), (option, r.notes)


def test_node_evidence_on_a_line_that_labels_both_host_and_rank_needs_no_map(tmp_path: Path) -> None:
    r = _classify(tmp_path, f"[prterun-l1-1@1,7][x4102c5s4b0n0:99]<stderr>: {ECC}\n", hosts=FQDN)
    assert (r.cls, r.bad_hosts, r.rank_hosts) == ("node", [FQDN[2]], {7: FQDN[2]})


def test_unlabelled_node_evidence_belongs_to_the_host_of_the_first_exit_notice(tmp_path: Path) -> None:
    """srun without --label: the ECC line names nothing, but it came before srun's first exit notice, which names
    the node of the one task that failed first (issue 35: the launcher's own attribution before guessing)."""
    text = f"step=10\n{ECC}\nsrun: error: n3: task 3: Exited with exit code 1\n"
    r = _classify(tmp_path, text)
    assert (r.cls, r.bad_hosts, r.suspect_hosts[:1]) == ("node", ["n3"], ["n3"])


def test_open_mpi_exit_notice_maps_the_rank_for_tagged_node_evidence(tmp_path: Path) -> None:
    text = (
        f"[1,3]<stderr>:{ECC}\n"
        "mpirun noticed that process rank 3 with PID 5123 on node n3 exited on signal 6 (Aborted).\n"
    )
    r = _classify(tmp_path, text)
    assert (r.cls, r.bad_hosts) == ("node", ["n3"]) and r.rank_hosts[3] == "n3"


# --- torchrun / elastic failure tables ---------------------------------------------------------------------
TORCHRUN = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2024-05-07_10:21:40
  host      : n2
  rank      : 5 (local_rank: 1)
  exitcode  : -15 (pid: 14691)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 14691
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-05-07_10:21:33
  host      : n3
  rank      : 6 (local_rank: 0)
  exitcode  : -9 (pid: 14750)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 14750
============================================================
"""


def test_torchrun_table_maps_ranks_and_leads_with_the_root_cause(tmp_path: Path) -> None:
    r = _classify(tmp_path, "step=4\n" + TORCHRUN)
    assert r.cls == "crash" and r.bad_hosts == []
    assert r.suspect_hosts[:1] == ["n3"] and r.rank_hosts == {5: "n2", 6: "n3"}


def test_torchrun_table_places_node_evidence_named_by_rank(tmp_path: Path) -> None:
    r = _classify(tmp_path, f"[rank6]: {ECC}\n" + TORCHRUN)
    assert (r.cls, r.bad_hosts) == ("node", ["n3"])


def test_torchrun_table_rows_for_hosts_outside_the_job_place_nothing(tmp_path: Path) -> None:
    r = _classify(tmp_path, TORCHRUN.replace(": n3", ": localhost").replace(": n2", ": localhost"))
    assert r.rank_hosts == {} and r.suspect_hosts == []


# --- launcher daemons ----------------------------------------------------------------------------------------
def test_hydra_proxies_reporting_the_teardown_are_not_blamed(tmp_path: Path) -> None:
    text = (
        "step=12\n"
        "===================================================================================\n"
        "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
        "=   PID 5123 RUNNING AT n3\n"
        "=   EXIT CODE: 139\n"
        "=   CLEANING UP REMAINING PROCESSES\n"
        "===================================================================================\n"
        "[proxy:0:1@n2] HYD_pmcd_pmip_control_cmd_cb (./pm/pmiserv/pmip_cb.c:886): assert (!closed) failed\n"
        "[proxy:0:1@n2] HYDT_dmxu_poll_wait_for_event (./tools/demux/demux_poll.c:77): callback returned error status\n"
        "[proxy:0:3@n4] main (./pm/pmiserv/pmip.c:206): demux engine error waiting for event\n"
    )
    r = _classify(tmp_path, text, 139)
    assert r.cls == "crash" and r.suspect_hosts[:1] == ["n3"]
    assert "n2" not in r.suspect_hosts[:1] and r.counts.get("cascade", 0) >= 3


@pytest.mark.parametrize(
    ("line", "host"),
    [
        ("mpiexec: Error: lost connection to palsd on n3", "n3"),
        ("srun: error: Node failure on n3", "n3"),
        (
            "slurmstepd: error: *** JOB 1234 STEPD TERMINATED ON n3 AT 2024-05-07T10:21:33 DUE TO JOB NOT ENDING WITH SIGNALS ***",
            "n3",
        ),
        (
            "srun: error: Task launch for StepId=1234.0 failed on node n3: Communication connection failure",
            "n3",
        ),
        ("ssh: connect to host n3 port 22: No route to host", "n3"),
        ("Remote daemon: prted on node n3", "n3"),
    ],
)
def test_launcher_daemon_deaths_name_their_host(tmp_path: Path, line: str, host: str) -> None:
    r = _classify(tmp_path, f"step=3\n{line}\n")
    assert (r.cls, r.bad_hosts) == ("node", [host]), r.matches


# --- evidence that names only an address ---------------------------------------------------------------------
IPMAP = [("10.0.0.1", "n1"), ("10.0.0.2", "n2"), ("10.0.0.3", "n3"), ("10.0.0.4", "n4")]
GLOO = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [{ip}]:27547"
IB = "NCCL WARN NET/IB : Got completion from peer {ip}<43222> with status=12 opcode=0 len=0 vendor err 129 (Recv)"


def test_many_reporters_blaming_one_address_point_at_its_host(tmp_path: Path) -> None:
    text = "".join(
        f"{h}: [rank{i}]: " + GLOO.format(ip="10.0.0.3") + "\n" for i, h in enumerate(["n1", "n2", "n4"])
    )
    r = _classify(tmp_path, "step=9\n" + text, ipmap=IPMAP)
    assert r.suspect_hosts == ["n3"], r.suspect_hosts  # the reporters are not suspects
    assert any("point at n3" in n for n in r.notes)


def test_the_host_in_every_failing_connection_is_the_suspect(tmp_path: Path) -> None:
    """n3 reports losing n1, n2 reports losing n3: only n3 is in both connections."""
    text = (
        "n3:81230:81301 [0] " + IB.format(ip="10.0.0.1") + "\n"
        "n2:81231:81302 [1] " + IB.format(ip="10.0.0.3") + "\n"
        "srun: error: n1: task 0: Exited with exit code 1\n"
    )
    r = _classify(tmp_path, text, ipmap=IPMAP)
    assert r.cls == "crash" and r.suspect_hosts[:1] == ["n3"]


def test_an_address_outside_the_job_blames_no_one(tmp_path: Path) -> None:
    text = "n1: " + GLOO.format(ip="10.9.9.9") + "\nn2: " + GLOO.format(ip="10.9.9.9") + "\n"
    r = _classify(tmp_path, text, ipmap=IPMAP)
    assert r.bad_hosts == [] and not any("point at" in n for n in r.notes)


def test_peer_evidence_without_an_ipmap_degrades_to_no_host(tmp_path: Path) -> None:
    text = "n1: " + GLOO.format(ip="10.0.0.3") + "\nn2: " + GLOO.format(ip="10.0.0.3") + "\n"
    r = _classify(tmp_path, text)
    assert r.cls == "crash" and "n3" not in r.suspect_hosts


# --- service faults and the same fault everywhere ------------------------------------------------------------
@pytest.mark.parametrize(
    "line",
    [
        "|CCL_ERROR| internal_kvs.cpp:120 kvs_get_value_by_name_key: timeout limit (120 sec) on get: CCL_POD_ADDR",
        "|CCL_ERROR| atl_ofi_helper.cpp:1010 atl_ofi_get_prov_list: fi_getinfo error: ret -61, providers 0",
        "MPIR_pmi_barrier(273).......:  PMI2 KVS_Fence failed: -1",
    ],
)
def test_service_faults_are_system(tmp_path: Path, line: str) -> None:
    text = "".join(f"{h}: {line}\n" for h in HOSTS[:2])
    r = _classify(tmp_path, text)
    assert (r.cls, r.bad_hosts) == ("system", [])


def test_the_same_fault_on_every_node_is_app(tmp_path: Path) -> None:
    fault = "Memory access fault by GPU node-4 (Agent handle: 0x55f0c2f0) on address 0x7f2a00000000. Reason: Page not present or supervisor privilege."
    text = "".join(f"{h}: step=1 loss=9.1\n{h}: {fault}\n" for h in HOSTS)
    r = _classify(tmp_path, text, 134)
    assert (r.cls, r.bad_hosts) == ("app", []) and any("same fault everywhere" in n for n in r.notes)


def test_host_memory_exhausted_on_every_node_while_loading_is_app(tmp_path: Path) -> None:
    text = "".join(
        f"slurmstepd-{h}: error: Detected 1 oom_kill event in StepId=1234.0. Some of the step tasks have been OOM Killed.\n"
        for h in HOSTS
    )
    r = _classify(tmp_path, "loading checkpoint shards\n" + text, 137)
    assert (r.cls, r.bad_hosts) == ("app", [])


def test_the_same_fault_on_one_node_stays_a_crash_of_that_node(tmp_path: Path) -> None:
    fault = "Memory access fault by GPU node-4 (Agent handle: 0x55f0c2f0) on address 0x7f2a00000000."
    r = _classify(tmp_path, f"n1: step=1\nn2: {fault}\n", 134)
    assert r.cls == "crash" and r.suspect_hosts[:1] == ["n2"]


# --- sources -------------------------------------------------------------------------------------------------
ALL = pat.load(pat.DEFAULT_SETS)


@pytest.mark.parametrize("p", ALL, ids=lambda p: p.id)
def test_every_pattern_names_where_its_message_is_printed(p: pat.Pattern) -> None:
    assert p.url, "every pattern carries a source"
    assert p.positive and p.negative
    if p.id != "app.rank_host":  # this project's own trainer line
        assert pat.public_source(p), p.url


def test_the_patterns_command_lists_sources_and_counts_the_missing(tmp_path: Path) -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "AGPT_PYTHON": sys.executable}
    r = subprocess.run(
        [str(ROOT / "bin" / "agpt-failover"), "patterns"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any(line.startswith("gloo.peer_closed") and "https://" in line for line in lines)
    assert lines[-1].startswith(
        f"{len(ALL)} patterns in {len(pat.DEFAULT_SETS)} sets: 1 without a public source"
    )
    site = site_pattern_set(
        tmp_path / "site", "mysite", "mysite.gpu", "node", "GPU is dead", "GPU is dead", "GPU is fine"
    )
    r = subprocess.run(
        [str(ROOT / "bin" / "agpt-failover"), "patterns", "--sets", "mysite"],
        capture_output=True,
        text=True,
        env={**env, "FAILOVER_PATTERN_PATH": str(site)},
        timeout=120,
    )
    assert r.returncode == 0 and "1 without a public source (mysite.gpu)" in r.stdout, r.stdout


@pytest.mark.parametrize("max_mb", [0, 64])
def test_a_rank_placed_megabytes_away_is_found(tmp_path: Path, max_mb: int) -> None:
    """The only line placing rank 3 is megabytes into the log; the node evidence names only the rank."""
    filler = "".join(f"0: step={i} loss=2.5\n" for i in range(150000))
    text = filler + "n4 3: step=0 loss=9.9\n" + filler + f"[rank3]: {ECC}\n"
    r = _classify(tmp_path, text, max_mb=max_mb)
    assert (r.cls, r.bad_hosts) == ("node", ["n4"])
