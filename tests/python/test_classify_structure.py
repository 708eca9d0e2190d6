"""The classifier's structural rules (agpt.failover.attribution, labels, decide), whatever the wording: time stamps
in front of lines, hosts a failure line names, one host's ranks against the application, a first cause against its
consequences.  Each test writes a log whose lines no pattern was written for where it can."""

from __future__ import annotations

from pathlib import Path

from agpt.failover import classify as cl
from agpt.failover.hostmatch import HostMatcher
from agpt.failover.labels import split_labels, stamp

HOSTS = ["nid001234", "nid001235", "nid001236", "nid001237"]


def run(tmp: Path, text: str, rc: int = 1, ipmap: list[tuple[str, str]] | None = None) -> cl.Classification:
    log = tmp / "a.log"
    log.write_text(text)
    return cl.classify(log, rc, HOSTS, ipmap, None, 1e9, None)


def test_time_stamps_in_front_are_labels_and_are_read() -> None:
    m = HostMatcher(hosts=HOSTS)
    for line, host, rank, when in [
        ("[2026-04-22 21:34:20] nid001235:202016:202235 [0] NCCL WARN x", "nid001235", None, 77660.0),
        ("1: E0227 17:39:41.510000 293816 api.py:732] RuntimeError: x", None, 1, 63581.51),
        ("2019-06-02T16:13:44.884Z: [1,12]<stdout>:nid001236:815:864 [0] NCCL WARN x", "nid001236", 12, 58424.884),
        ("Mon Dec 10 08:18:05 2018[1,8]<stderr>:[nid001237:13210:0:13210]    ud_iface.c:732  UCX x", "nid001237", 8, 29885.0),
    ]:  # fmt: skip
        body, h, r = split_labels(line, m)
        assert (h, r) == (host, rank), line
        assert body.endswith("x") and stamp(line) is not None and stamp(line)[1] == when  # type: ignore[index]


def test_the_first_cause_leads_the_suspects_by_time_stamp_not_by_line(tmp_path: Path) -> None:
    """Two hosts' lines arrive out of order in a merged log; their stamps tell which failed first."""
    text = (
        "[2026-01-05 10:00:09] nid001236: Segmentation fault in worker thread\n"
        "[2026-01-05 10:00:02] nid001235: Segmentation fault in worker thread\n"
    )
    c = run(tmp_path, text.replace("Segmentation fault in worker thread", "*** Process received signal ***"))
    assert c.suspect_hosts[:2] == ["nid001235", "nid001236"]


def test_a_host_others_name_while_it_names_nobody_leads_the_suspects(tmp_path: Path) -> None:
    text = (
        "[nid001235] torch.distributed.DistNetworkError: timed out after 600 s while reaching (nid001237, 29500)\n"
        "[nid001236] torch.distributed.DistNetworkError: timed out after 600 s while reaching (nid001237, 29500)\n"
    )
    c = run(tmp_path, text)
    assert (c.cls, c.bad_hosts, c.suspect_hosts[:1]) == ("crash", [], ["nid001237"])
    assert "nid001235" not in c.suspect_hosts and "nid001236" not in c.suspect_hosts


def test_two_hosts_naming_each_other_single_out_neither(tmp_path: Path) -> None:
    text = (
        "[nid001235] RuntimeError: lost the link to nid001236\n"
        "[nid001236] RuntimeError: lost the link to nid001235\n"
    )
    c = run(tmp_path, text)
    assert not any("point at" in n for n in c.notes), c.notes


def test_an_error_two_ranks_of_one_host_raise_is_that_hosts_crash_not_the_application(tmp_path: Path) -> None:
    text = "".join(f"{r}: rank={r} local_rank={r % 2} world_size=4 host={HOSTS[r // 2]}\n" for r in range(4))
    text += "2: RuntimeError: device reported an unrecoverable state\n3: RuntimeError: device reported an unrecoverable state\n"
    c = run(tmp_path, text)
    assert c.cls == "crash" and c.suspect_hosts[:1] == ["nid001235"]
    text += "0: RuntimeError: device reported an unrecoverable state\n"
    assert run(tmp_path, text).cls == "app"  # two hosts: the code


def test_pmi_errors_on_other_hosts_after_one_hosts_crash_are_its_consequences(tmp_path: Path) -> None:
    text = (
        "srun: error: nid001236: task 2: Segmentation fault (core dumped)\n"
        "[nid001234] PMI2 KVS_Fence failed: -1\n"
        "[nid001235] PMI2 KVS_Fence failed: -1\n"
    )
    c = run(tmp_path, text.replace("srun: error: nid001236: task 2: Segmentation fault (core dumped)",
                                   "[nid001236] *** Process received signal ***"))  # fmt: skip
    assert c.cls == "crash" and c.suspect_hosts[:1] == ["nid001236"]
    assert any("consequences" in n for n in c.notes)
    only_pmi = "[nid001234] PMI2 KVS_Fence failed: -1\n[nid001235] PMI2 KVS_Fence failed: -1\n"
    assert run(tmp_path, only_pmi).cls == "system"


def test_a_task_killed_before_any_exit_is_the_crash_and_after_them_the_teardown(tmp_path: Path) -> None:
    exits = "".join(f"srun: error: {HOSTS[r]}: task {r}: Exited with exit code 1\n" for r in (2, 3, 0))
    killed = "srun: error: nid001235: task 1: Killed\n"
    # The OOM killer (or a kill -9) takes task 1; the others lose their peer and exit 1 on their own.
    c = run(tmp_path, killed + "srun: launch/slurm: _step_signal: Terminating StepId=7.0\n" + exits)
    assert (c.cls, c.bad_hosts, c.suspect_hosts[:1]) == ("crash", [], ["nid001235"])
    assert c.evidence[0] == killed.strip() and any("died of a signal" in n for n in c.notes)
    # Every task but one exits 1 first, then srun kills the last: the same error everywhere, the killed one innocent.
    c = run(tmp_path, exits + "srun: launch/slurm: _step_signal: Terminating StepId=7.0\n" + killed)
    assert c.cls == "app" and not any("died of a signal" in n for n in c.notes)


# --- issue 35: evidence outranks majorities; what lies outside the job; where a host-less line belongs ---------
IPS = [(f"10.100.0.{34 + i}", h) for i, h in enumerate(HOSTS)]
STEPS = "".join(f"{r}: step=1200 loss=2.91\n" for r in range(4))
EXITS = "".join(f"srun: error: {HOSTS[r]}: task {r}: Exited with exit code 1\n" for r in (1, 2, 3, 0))


def test_one_peer_named_by_many_reporters_outranks_every_rank_exiting_alike(tmp_path: Path) -> None:
    lost = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.100.0.34]:47713"
    c = run(tmp_path, STEPS + "".join(f"{r}: {lost}\n" for r in (1, 2, 3)) + EXITS, ipmap=IPS)
    assert (c.cls, c.bad_hosts, c.suspect_hosts[:1]) == ("crash", [], ["nid001234"])
    assert any("evidence about a host outranks the majority" in n for n in c.notes)
    # Without the lines naming anyone, the same exits everywhere are still the application's.
    assert run(tmp_path, STEPS + EXITS).cls == "app"


def test_a_lost_peer_that_names_a_host_is_evidence_about_that_host(tmp_path: Path) -> None:
    reset = "RuntimeError: Connection reset by peer (nid001234:29500)"
    c = run(tmp_path, STEPS + "".join(f"{r}: {reset}\n" for r in (2, 3)) + EXITS)
    assert (c.cls, c.suspect_hosts[:1]) == ("crash", ["nid001234"])


def test_an_application_error_everywhere_with_no_host_named_stays_app(tmp_path: Path) -> None:
    c = run(tmp_path, STEPS + "".join(f"{r}: ValueError: bad shape (4096, 7)\n" for r in range(4)) + EXITS)
    assert c.cls == "app"


def test_a_service_outside_the_job_that_every_host_reports_is_the_sites(tmp_path: Path) -> None:
    err = "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='obj.example.org', port=443): Max retries exceeded with url: https://obj.example.org/data/shard-7.bin"
    c = run(tmp_path, STEPS + "".join(f"{r}: {err}\n" for r in range(4)) + EXITS)
    assert c.cls == "system" and c.bad_hosts == []
    assert any("names an endpoint outside the job" in n for n in c.notes)
    # The same error naming a host of the job is about that host, not the site.
    inside = err.replace("obj.example.org", "nid001236")
    assert run(tmp_path, STEPS + "".join(f"{r}: {inside}\n" for r in (0, 1, 3)) + EXITS).cls != "system"
    # One host alone reaching out is not the site.
    assert run(tmp_path, STEPS + f"2: {err}\n" + EXITS).cls != "system"


def test_a_host_less_device_fault_before_the_first_exit_belongs_to_the_exiting_host(tmp_path: Path) -> None:
    ecc = "RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
    first = "srun: error: nid001236: task 2: Exited with exit code 1\n"
    rest = "".join(f"srun: error: {HOSTS[r]}: task {r}: Exited with exit code 1\n" for r in (0, 1, 3))
    c = run(tmp_path, STEPS + ecc + first + rest)
    assert (c.cls, c.bad_hosts) == ("node", ["nid001236"])
    assert any("printed before the first exit notice" in n for n in c.notes)
    # Printed after the first exit, it could be anyone's: no host is proven.
    c = run(tmp_path, STEPS + first + ecc + rest)
    assert (c.cls, c.bad_hosts) == ("crash", [])


def test_an_srun_task_id_is_not_a_trainers_rank_unless_the_log_says_so(tmp_path: Path) -> None:
    """torchrun under srun: one task per node holds several ranks, so srun's `task 1` is not [rank1]'s host."""
    two = HOSTS[:2]
    notices = "srun: error: nid001234: task 0: Exited with exit code 1\nsrun: error: nid001235: task 1: Exited with exit code 1\n"
    ecc = "RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
    log = tmp_path / "a.log"
    log.write_text("[rank0]: step=1200 loss=2.9\n[rank1]: " + ecc + notices)
    c = cl.classify(log, 1, two, None, None, 1e9, None)
    assert (c.cls, c.bad_hosts) == ("crash", [])  # never nid001235 on task 1's word
    assert any("[rank1] names no known host" in n for n in c.notes)
    # The launcher's label states which task printed the rank's line: that task's host.
    log.write_text("0: [rank0]: step=1200 loss=2.9\n0: [rank1]: " + ecc + notices)
    c = cl.classify(log, 1, two, None, None, 1e9, None)
    assert (c.cls, c.bad_hosts) == ("node", ["nid001234"])
    # An MPI launcher's label numbers ranks as the trainer does: PALS' `HOST N: ` places [rankN].
    log.write_text("nid001234 0: step=1200\nnid001235 1: step=1200\n[rank1]: " + ecc)
    assert cl.classify(log, 1, two, None, None, 1e9, None).bad_hosts == ["nid001235"]
