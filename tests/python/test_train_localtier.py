"""The local checkpoint tier in the real trainer, on ranks that act as separate nodes (one node-local folder each,
keyed by node name as on a cluster): a lost node's shards come from its partner's copy and the run goes on
bit-identically, from either tier; what cannot be trusted (a corrupt shard, two partners lost, another layout or
job) falls back to the global checkpoint with the reason; a folder that cannot be used turns the tier off with
one warning and training goes on.  The same on the real Slurm cluster: test_localtier_cluster.py."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from agpt import ckptdir, localtier, nodelocal
from agpt.failover import plan as planlib
from train_util import run_nodes, same_steps, step_lines

STEPS = 14
# A local save every 3 steps; the schedule's horizon fixed, so a run stopped early trains the same steps.
LOCAL = ("--set", "checkpoint.local_interval=3", "--set", f"optim.decay_steps={STEPS}",
         "--set", "checkpoint.save_final=false")  # fmt: skip


def folder(shm: Path, run: Path, host: str) -> Path:
    return localtier.node_folder(shm, run, host)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An unfaulted run on two nodes, no local tier: the losses every resumed run must print."""
    run = tmp_path_factory.mktemp("ref") / "run"
    r = run_nodes(["nA", "nB"], run, "--steps", str(STEPS), "--ckpt-interval", "0", "--set",
                  f"optim.decay_steps={STEPS}", "--set", "checkpoint.save_final=false")  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    shm = tmp_path / "shm"
    shm.mkdir(exist_ok=True)
    return {"SITE_LOCAL_CKPT_DIR": str(shm), **extra}


def test_a_lost_node_resumes_from_its_partners_copy_as_from_the_global_checkpoint(
    tmp_path: Path, reference: str
) -> None:
    env = _env(tmp_path)
    shm, run = tmp_path / "shm", tmp_path / "run"
    r = run_nodes(["nA", "nB"], run, "--steps", "11", "--ckpt-interval", "9", *LOCAL, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "local checkpoint tier: on:" in r.stdout and "nA's copy on nB" in r.stdout
    marker = json.loads((folder(shm, run, "nA") / "step-9" / localtier.NODE_MARKER).read_text())
    assert sorted(marker["shards"]) == ["0", "1"] and marker["shards"]["1"]["owner"] == "nB"
    assert sorted(p.name for p in folder(shm, run, "nB").iterdir()) == ["step-6", "step-9"]  # local_keep 2
    global_only = tmp_path / "global"
    shutil.copytree(run, global_only)
    shutil.rmtree(folder(shm, run, "nB"))  # nB is lost with its memory; nC, a spare, takes its place
    r = run_nodes(["nA", "nC"], run, "--steps", str(STEPS), *LOCAL, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert ("resumed from the local tier (step 9: 1 rank(s) from their node's memory, 1 from a partner's copy; "
            "rank 1 from nA)") in r.stdout  # fmt: skip
    same_steps(r.stdout, reference, 10, STEPS)
    clocks = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    assert [(c["step"], c["tier"], c["from_partner"]) for c in clocks if c.get("tier") == "local"] == [
        (10, "local", [1])
    ]
    # The same step from the global tier (the local tier off): the same losses, to the last digit.
    r = run_nodes(["nA", "nC"], global_only, "--steps", str(STEPS), "--set", f"optim.decay_steps={STEPS}",
                  "--set", "checkpoint.save_final=false", env=env)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"resumed from {global_only}/ckpt/step-9" in r.stdout
    same_steps(r.stdout, reference, 10, STEPS)


def test_a_save_attempt_keeps_what_only_node_memory_held(tmp_path: Path, reference: str) -> None:
    """The failover loop's save attempt (agpt.failover.policy, rule 6), the trainer's half: a job's last minutes,
    a node lost, progress past the global checkpoint only in node memory.  The relaunch starts inside its
    deadline margin: it restores the local step, trains one step and saves it globally (exit 75), so the next job
    does not train those steps again."""
    env = _env(tmp_path)
    run = tmp_path / "run"
    r = run_nodes(["nA", "nB"], run, "--steps", "11", "--ckpt-interval", "6", *LOCAL, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    log = tmp_path / "attempt.log"
    log.write_text(r.stdout)
    assert planlib.local_tier_on(log)  # what the loop reads from the attempt's log: the tier was on
    assert ckptdir.resume_step(run) == 6  # the global tier holds step 6; node memory steps 6 and 9
    shutil.rmtree(folder(tmp_path / "shm", run, "nB"))  # nB is lost; nC takes its place
    late = {**env, "AGPT_DEADLINE_EPOCH": str(int(time.time()) + 120)}
    r = run_nodes(["nA", "nC"], run, "--steps", str(STEPS), *LOCAL, "--set", "train.deadline_margin_s=3600",
                  env=late)  # fmt: skip
    assert r.returncode == 75, r.stdout + r.stderr
    assert "resumed from the local tier (step 9:" in r.stdout
    same_steps(r.stdout, reference, 10, 10)  # one step, the one the reference ran
    assert ckptdir.resume_step(run) == 10  # saved globally: what node memory held is kept


def test_a_save_before_a_stop_keeps_node_memory_without_training_the_failing_step(
    tmp_path: Path, reference: str
) -> None:
    """The failover loop's save before a stop for a person (agpt.failover.policy, `then`), the trainer's half: a
    bug that fails the next step every time, progress past the global checkpoint only in node memory.  With
    checkpoint.save_and_stop (what the loop exports) the relaunch restores the local step and saves it globally
    before any step (exit 75), so the fix resumes there; asked again, it finds nothing newer and writes nothing."""
    env = _env(tmp_path)
    run = tmp_path / "run"
    r = run_nodes(["nA", "nB"], run, "--steps", "11", "--ckpt-interval", "6", *LOCAL, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert ckptdir.resume_step(run) == 6  # node memory holds step 9
    save = {**env, "AGPT_CHECKPOINT_SAVE_AND_STOP": "true"}
    r = run_nodes(["nA", "nB"], run, "--steps", str(STEPS), *LOCAL, env=save)
    assert r.returncode == 75, r.stdout + r.stderr
    assert "resumed from the local tier (step 9:" in r.stdout
    assert "agpt: event: save before a stop: step 9 saved globally" in r.stdout
    assert not step_lines(r.stdout)  # no step trained: the failing one is not run
    assert ckptdir.resume_step(run) == 9
    r = run_nodes(["nA", "nB"], run, "--steps", str(STEPS), *LOCAL, env=save)
    assert r.returncode == 75, r.stdout + r.stderr
    assert "save before a stop: nothing newer than step 9 to save" in r.stdout
    r = run_nodes(
        ["nA", "nB"], run, "--steps", str(STEPS), *LOCAL, env=env
    )  # the fix: training goes on from 9
    assert r.returncode == 0, r.stdout + r.stderr
    same_steps(r.stdout, reference, 10, STEPS)


def test_a_corrupt_local_shard_is_found_before_loading_and_the_global_checkpoint_used(
    tmp_path: Path, reference: str
) -> None:
    env = _env(tmp_path)
    shm, run = tmp_path / "shm", tmp_path / "run"
    r = run_nodes(["nA", "nB"], run, "--steps", "11", "--ckpt-interval", "6", *LOCAL, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    shard = folder(shm, run, "nA") / "step-9" / localtier.shard_name(0)
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0x01  # one bit of the last tensor
    shard.write_bytes(bytes(data))
    r = run_nodes(["nA", "nB"], run, "--steps", str(STEPS), *LOCAL, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"local step 9 cannot be restored: nA:{shard}: sha256 " in r.stderr
    assert "resuming from the global tier" in r.stderr
    assert f"resumed from {run}/ckpt/step-6" in r.stdout
    same_steps(r.stdout, reference, 7, STEPS)


def test_two_partners_lost_at_once_fall_back_and_two_apart_do_not(tmp_path: Path) -> None:
    """Four nodes in a ring (nA's copy on nB, nB's on nC, ...): losing nA and nC leaves a copy of each; losing nA
    and its partner nB loses rank 0's shard."""
    env = _env(tmp_path)
    shm = tmp_path / "shm"
    outs = []
    for lost, spares, tier in ((["nA", "nC"], ["nE", "nF"], "local"), (["nA", "nB"], ["nE", "nF"], "global")):
        run = tmp_path / f"run-{tier}"
        hosts = ["nA", "nB", "nC", "nD"]
        r = run_nodes(hosts, run, "--steps", "11", "--ckpt-interval", "6", *LOCAL, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        for h in lost:
            shutil.rmtree(folder(shm, run, h))
        now = [spares[lost.index(h)] if h in lost else h for h in hosts]
        r = run_nodes(now, run, "--steps", str(STEPS), *LOCAL, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        if tier == "local":
            assert "(step 9: 2 rank(s) from their node's memory, 2 from a partner's copy; rank 0 from nB; " \
                   "rank 2 from nD)" in r.stdout  # fmt: skip
        else:
            assert "local step 9: rank 0's shard is on no node of this launch" in r.stdout
            assert f"resumed from {run}/ckpt/step-6" in r.stdout
        outs.append(r.stdout)
    same_steps(outs[0], outs[1], 10, STEPS)  # four ranks sum in another order than the reference's two


def test_a_shard_of_another_layout_or_job_is_never_loaded(tmp_path: Path) -> None:
    env = _env(tmp_path)
    run = tmp_path / "run"
    r = run_nodes(["nA", "nB"], run, "--steps", "11", "--ckpt-interval", "6", *LOCAL, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    # Two ranks per node: world size 4, dp 4 (short runs that save nothing, so the shards stay for the next).
    r = run_nodes(["nA", "nB"], run, "--steps", "8", *LOCAL, env=env, per_node=2)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "nA: local step 9 is of another world_size/layout: world_size 2 (now 4), layout 'dp2xtp1' (now " \
           "'dp4xtp1'); not used" in r.stdout  # fmt: skip
    assert f"resumed from {run}/ckpt/step-6" in r.stdout
    # A new job of the chain: its nodes' memory is not this job's.
    r = run_nodes(["nA", "nB"], run, "--steps", "8", *LOCAL, env={**env, "FAILOVER_JOBID": "4242"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "nA: local step 9 is of another job: job '' (now '4242'); not used" in r.stdout
    assert f"resumed from {run}/ckpt/step-6" in r.stdout


@pytest.mark.parametrize(
    ("case", "hosts", "per_node"),
    [("missing", ["nA", "nB"], 1), ("not writable", ["nA", "nB"], 1), ("full", ["nA", "nB"], 1),
     ("one node", ["nA"], 2), ("step link", ["nA", "nB"], 1)],
)  # fmt: skip
def test_a_tier_that_cannot_work_is_off_with_one_warning_and_training_goes_on(
    tmp_path: Path, case: str, hosts: list[str], per_node: int
) -> None:
    env = _env(tmp_path)
    want = {"missing": f"off: nA: {tmp_path}/nope: missing", "not writable": "off: nA: /proc/agpt-",
            "full": "off: a save failed: nA: ", "one node": "off: needs 2 nodes or more",
            "step link": "off: a save failed: nA: "}[case]  # fmt: skip
    if case == "missing":
        env["SITE_LOCAL_CKPT_DIR"] = str(tmp_path / "nope")
    elif case == "not writable":
        env["SITE_LOCAL_CKPT_DIR"] = "/proc"  # not writable, even by root
    elif case == "full":
        env["AGPT_TEST_LOCAL_FULL"] = "6:nA"
    run = tmp_path / "run"
    planted = tmp_path / "elsewhere"
    if case == "step link":  # issue 37: a step-N folder planted as a link was written into; now never entered
        planted.mkdir()
        node = nodelocal.private_dir(folder(tmp_path / "shm", run, "nA"))
        (node / "step-3").symlink_to(planted)
    r = run_nodes(hosts, run, "--steps", "9", "--ckpt-interval", "4", *LOCAL, env=env, per_node=per_node)
    assert r.returncode == 0, r.stdout + r.stderr
    warnings = [x for x in r.stderr.splitlines() if "local checkpoint tier" in x]
    assert (
        len(warnings) == 1 and want in warnings[0] and "training goes on with the global tier" in warnings[0]
    )
    if case == "full":
        assert "No space left on device" in warnings[0]
        held = [p.name for p in folder(tmp_path / "shm", run, "nB").iterdir()]
        # 3 by the local interval, 4 with the global save (memory holds it too); 6 failed and was removed
        assert sorted(held) == ["step-3", "step-4"]
    if case == "step link":
        assert "step-3: is a symbolic link" in warnings[0] and list(planted.iterdir()) == []
    assert sorted(step_lines(r.stdout)) == list(range(1, 10))
    assert (run / "ckpt" / "step-8" / ".complete").is_file()


def test_node_local_folders_are_private_and_never_followed_through_a_link(tmp_path: Path) -> None:
    planted = tmp_path / "elsewhere"
    planted.mkdir()
    link = tmp_path / "agpt-ckpt.x.nA"
    link.symlink_to(planted)
    with pytest.raises(nodelocal.NodeLocalError, match="symbolic link"):
        nodelocal.private_dir(link)
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o777)
    loose.chmod(0o777)
    nodelocal.private_dir(loose)
    assert loose.stat().st_mode & 0o777 == 0o700
    (tmp_path / "file").write_text("x")
    with pytest.raises(nodelocal.NodeLocalError, match="not a directory"):
        nodelocal.private_dir(tmp_path / "file")
