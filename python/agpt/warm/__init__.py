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
The FAILOVER_WARM words for each site's launcher: `agpt check` (agpt.check.warm_row).
"""
