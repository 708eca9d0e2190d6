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
