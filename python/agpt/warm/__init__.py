"""Warm ranks: training processes parked on every node of the job (spares included), Python and torch imported and
the config parsed, waiting for an assignment, so a relaunch does not start interpreters.

Why: after the node-local tier made the state restore about a second, what a recovery costs is start-up: a new
process imports torch and the trainer (seconds on a loaded node), and every job of a chain pays it again.

How they live across attempts (the torchrun elastic agent's shape, with the failover loop still deciding):
  agent   `agpt warm serve --slots K -- agpt train ...`, one per node, started once per job by the failover loop
          (FAILOVER_WARM: the launcher words for one task on every host) beside the attempts: it keeps K parked
          processes, each a fresh interpreter (never a fork of a process that imported torch, so never a fork after
          a device was initialised), and replaces one that ends or dies.
  parked  imports torch and the trainer, parses the config, then waits on an abstract Unix socket named after the
          user, the run directory, the node and its slot (the local rank).  No device is touched until assigned.
  claim   what the launcher starts for each rank of an attempt (`{warm}` in the loop's command becomes `agpt warm
          claim --`): a standard-library process that hands its rank's assignment (its environment: rank, world,
          rendezvous; its working directory and argv) and its stdin/stdout/stderr (SCM_RIGHTS) to the parked
          process of its slot, forwards signals, and exits with its exit code; the parked process kills itself when
          the claim goes away (the launcher's teardown).  Refused (the reason printed, then the normal launch: the
          claim execs the command): no agent or parked process on the node, a parked process whose environment
          differs (the venv digest), a command other than `agpt train`, a rank of this attempt already held.
Standard library only in the agent and the claim (the recovery path); the parked process is the trainer.
"""

# FAILOVER_WARM for each launcher of lib/launch.sh: one task on every host ({hosts}: all the job's, spares too),
# beside the attempts' launches for the whole job.
LAUNCH_WORDS = {
    "srun": "srun --overlap --no-kill --kill-on-bad-exit=0 -N {nhosts} --nodelist {hosts} --ntasks-per-node=1",
    "pals": "mpiexec -n {nhosts} --ppn 1 --hostfile {hostfile}",
    "hydra": "mpiexec -f {hostfile} -n {nhosts} -ppn 1",
    "openmpi": "mpirun -np {nhosts} --hostfile {hostfile} --map-by ppr:1:node",
}


def site_row(launcher: str, container: str, image: str) -> str:
    """`agpt check`'s warm-ranks line: the FAILOVER_WARM words for the site's launcher, or why it cannot keep
    parked processes across attempts (the loop then runs without warm ranks)."""
    if container not in ("", "none") and image:
        return (f"cannot keep parked processes: ranks run in an image (SITE_CONTAINER={container}), the parked "
                "processes would run on the host; the loop runs without warm ranks")  # fmt: skip
    words = LAUNCH_WORDS.get(launcher)
    if words is None:
        return f"cannot keep parked processes: no launch of one task per host for SITE_LAUNCHER={launcher!r}"
    return f"FAILOVER_WARM='{words}' and {{warm}} before the rank's command (off: FAILOVER_WARM empty)"
