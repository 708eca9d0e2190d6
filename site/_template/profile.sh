# shellcheck shell=bash disable=SC2034
# site/_template/profile.sh: every key a site profile must set, with what reads it.  Copy this folder to
# site/NAME/, edit the values, then run `agpt site check site/NAME/profile.sh`.
#
# Rules (checked by `agpt site check`): only plain assignments `SITE_KEY=value` and arrays
# `SITE_KEY=(a b c)`, comments and blank lines; every key below present (empty is allowed where noted);
# no other key.  Values are Bash words, so "${HOME}/x" is expanded when the profile is sourced.
# Anything imperative (module use, conda activate, cleanup) goes in site/NAME/hooks/PHASE.sh:
#   hooks/pre-env.sh    sourced by env_setup before the module loads (e.g. `module use /soft/modulefiles`)
#   hooks/post-env.sh   sourced by env_setup after the module loads, before the venv (e.g. `conda activate`)
#   hooks/cleanup.sh    run on each node between failover attempts (kill leftover ranks holding GPUs)

# Short name; must equal the folder name.
SITE_NAME=_template
# One line for `agpt site list`.
SITE_DESCRIPTION="Template: documents every key"
# Extended regex matched against the short and the full host name by `agpt site detect` (AGPT_SITE overrides).
SITE_HOSTNAME_RE='^template-login-[0-9]+$'

# Scheduler: pbs | slurm | none.  Decides the directives `agpt jobgen` writes by default.
SITE_SCHEDULER=pbs
# Queue (PBS -q) or partition (Slurm --partition); empty: the scheduler's default.  A job config's
# `job.queue` wins.
SITE_QUEUE=prod
# Allocation to charge (PBS -A, Slurm --account); empty: the job script carries an `# EDIT` placeholder.
SITE_ACCOUNT=""
# Filesystems the job needs (PBS -l filesystems=, Slurm --licenses=); empty: none.
SITE_FILESYSTEMS=home
# Extra scheduler directives, one argument string each, written as `#PBS ...` / `#SBATCH ...`.
SITE_DIRECTIVES=("-l place=scatter")

# Accelerators and ranks per node (ranks default to one per GPU or GPU tile).
SITE_GPUS_PER_NODE=4
SITE_RANKS_PER_NODE=4
# Peak dense bf16 TFLOPS of the device one rank drives (a GPU, or a GPU tile/GCD when each rank has one),
# from the vendor's figure; the trainer's MFU in RUN_DIR/metrics.jsonl divides by it.  Empty: no MFU.
SITE_PEAK_TFLOPS=312
# Memory of the device one rank drives, in GiB (a GPU, or a GPU tile/GCD when each is its own rank); 0:
# unknown, `agpt check` then skips the memory check.  Cite the site's hardware page beside the value.
SITE_DEVICE_MEM_GIB=64
# Host memory (DDR) per node in GiB; `agpt check` holds the local checkpoint tier's memory per node
# (checkpoint.local_interval) against the tmpfs share of it.  0: unknown (not screened).  Cite the hardware page.
SITE_HOST_MEM_GIB=512
# Write bandwidth of the filesystem the run directory (checkpoints) lives on, in GB/s as the site publishes
# it (an aggregate peak: one job sees at most this); `agpt check` prints the checkpoint save time at it.
# 0: unknown.
SITE_FS_BW_GBPS=100
# Launcher: pals (Cray PALS mpiexec) | hydra (MPICH mpiexec) | openmpi (mpirun) | srun.
SITE_LAUNCHER=pals
# Extra launcher flags, one word each (e.g. --depth=8, --gpus-per-task=1).
SITE_LAUNCHER_FLAGS=(--genvall)
# CPU binding passed to the launcher (PALS --cpu-bind VALUE, srun --cpu-bind=VALUE, Open MPI --bind-to
# VALUE); empty: the launcher's default.  PALS lists look like list:1-8:9-16.
SITE_CPU_BIND=depth

# Environment modules loaded in order by env_setup (empty: none).
SITE_MODULES=()
# Environment variables exported by env_setup, KEY=VALUE each (collective library and fabric settings).
SITE_ENV=("OMP_NUM_THREADS=8")
# Node-local storage for staged venvs, data and checkpoints (`agpt yeet --dest`).
SITE_LOCAL_DIR=/tmp
# Node-local memory for the local checkpoint tier (checkpoint.local_interval): each rank's shard and a partner
# node's copy, in a private run-specific folder below this one (a tmpfs, so memory); empty: /dev/shm.
# Exported to the job; checkpoint.local_dir in a config overrides it.
SITE_LOCAL_CKPT_DIR=""
# Where a node's failure domain is named in its host name: an extended regex whose first group (else its whole
# match) is the domain (a blade, a chassis, a rack).  The local tier puts each node's copy on a node of another
# domain when no domain holds more than half of the job's nodes.  Empty: every node its own domain (a ring over
# the nodes).  Exported to the job.
SITE_FAILURE_DOMAIN_RE='^(x[0-9]+c[0-9]+)'

# Python environment recipe: the interpreter the venv is built from (after the modules are loaded), where
# venvs live (one per framework release, named after $CONDA_PREFIX or the last module; empty: use the
# current python, no venv), and whether to stage the venv to SITE_LOCAL_DIR with `agpt yeet` (0|1).
SITE_PYTHON=python3
SITE_VENV_DIR="${HOME}/venvs/template"
SITE_VENV_STAGE=0

# Spare nodes asked for on top of a job's nodes: a percentage of the nodes, at least SITE_SPARES_MIN.
# A job config's `job.spares` wins.
SITE_SPARES_PERCENT=2
SITE_SPARES_MIN=0
# Failure-pattern sets the failover classifier uses here (`agpt failover patterns` lists them with their
# sources): launchers pals hydra openmpi srun; vendor stacks cuda level_zero rocm gloo oneccl; PyTorch's
# own (torch: c10d, elastic); system app cascade.
SITE_FAILOVER_PATTERNS=(pals cuda torch system app cascade)
# May a job go on with fewer nodes when a node fails and no spare is left (0 | 1)?  1: the failover loop
# relaunches on the healthy nodes when the global batch is kept (FAILOVER_SHRINK, FAILOVER_MIN_NODES;
# docs/recovery.md); 0 where the site's policy or accounting forbids a job that runs below its node count.
SITE_FAILOVER_SHRINK=1
