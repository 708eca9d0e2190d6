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
# A node's mean time between failures in hours.  `agpt check` chooses both checkpoint tiers' intervals at job
# start from it (Young/Daly with the job's MTBF: this over the node count).  0 or unset: 8760 (the AuroraGPT
# talks: a node fails about once a year), said so in the check.  Cite your site's failure logs.
SITE_NODE_MTBF_H=8760
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

# Python environment recipe: the interpreter the venv is built from (after the modules are loaded) and where
# venvs live (one per framework release, named after $CONDA_PREFIX or the last module; empty: use the
# current python, no venv).
SITE_PYTHON=python3
SITE_VENV_DIR="${HOME}/venvs/template"
# How the venv reaches every node before the first launch (lib/env.sh env_stage; `agpt check` prints it):
#   yeet    `agpt yeet` copies it to SITE_LOCAL_DIR on each node (one rank per node) and the copy is activated
#   copper  a read-only FUSE cache of the shared tree (ALCF's Copper): `launch_copper.sh -v VIEW` with VIEW
#           SITE_LOCAL_DIR/$USER/copper_mount, then the venv is activated through VIEW/<its path>
#   sbcast  Slurm's sbcast: a tar of the venv broadcast to SITE_LOCAL_DIR on each node, unpacked there, activated
#   none    every rank reads the venv from the shared filesystem
# Staging that fails leaves the shared venv in use.  Cite the centre's guidance beside the value.
SITE_STAGE=none
# Extra words for the staging command: `agpt yeet` flags, `launch_copper.sh` options (-l LEVEL, -b CPUS, ...),
# `sbcast` flags (e.g. --compress).  Empty: none.
SITE_STAGE_OPTS=()
# Container runtime that wraps each rank's command when the job names an image (job.container_image in the run
# config; empty: no image, ranks run on the host).  The run directory and the toolkit are bound at their own
# paths, the host's environment (AGPT_*, FAILOVER_*, the launcher's rank variables) passes in and the host name is
# the node's, so heartbeats, the failover loop and the probe see the same hosts:
#   apptainer    apptainer exec --bind RUN_DIR,AGPT_HOME OPTS IMAGE CMD
#   podman-hpc   podman-hpc run --rm --net host --uts host --ipc host --env-host -v RUN_DIR:RUN_DIR ... OPTS IMAGE CMD
#   shifter      shifter --image=IMAGE --volume=RUN_DIR:RUN_DIR ... OPTS CMD
#   pyxis        srun --container-image=IMAGE --container-mounts=RUN_DIR:RUN_DIR,... OPTS CMD   (SITE_LAUNCHER=srun)
#   none         never wrapped
# Inside the image `agpt` runs the image's python3 (AGPT_CONTAINER_PYTHON overrides).
SITE_CONTAINER=none
# Extra words for the runtime, before the image (e.g. apptainer --nv, shifter --module=gpu).  Empty: none.
SITE_CONTAINER_OPTS=()
# Modules loaded after SITE_MODULES, only when the job runs in an image (e.g. apptainer).  Empty: none.
SITE_CONTAINER_MODULES=()
# How a new checkpoint directory (RUN_DIR/ckpt) is laid out before the first save, so every shard inherits it:
#   (lustre OPTS...)   lfs setstripe OPTS RUN_DIR/ckpt     (e.g. a progressive file layout: -E 1G -c 1 -E -1 -c 8)
#   (daos OPTS...)     daos fs set-attr --path=RUN_DIR/ckpt OPTS   (a dfuse-mounted DAOS container; --oclass=...)
#   ()                 the filesystem's default
# The trainer writes one file per rank (torch DCP, single_file_per_rank).  `agpt preflight` checks the layout is there.
SITE_CKPT_LAYOUT=()

# Spare nodes asked for on top of a job's nodes: a percentage of the nodes, at least SITE_SPARES_MIN.
# A job config's `job.spares` wins.
SITE_SPARES_PERCENT=2
SITE_SPARES_MIN=0
# Failure-pattern sets the failover classifier uses here (`agpt failover patterns` lists them with their
# sources): launchers pals hydra openmpi srun; vendor stacks cuda level_zero rocm gloo oneccl; PyTorch's
# own (torch: c10d, elastic); system app cascade.
SITE_FAILOVER_PATTERNS=(pals cuda torch system app cascade)

# Health sweep after a failure whose log proves no host guilty (lib/failover.sh FAILOVER_SWEEP overrides): `full`
# probes every active host at once (memory, /dev/shm and SITE_LOCAL_DIR free space, these mounts and the run
# directory, the accelerator driver, device and backend initialisation) then bisects a cross-host collective;
# `probe` only the first half; `off` leaves the blind rotation.  The failing hosts are evicted on that evidence.
SITE_SWEEP=full
# A command each probe runs on its own host (`bash -c`), e.g. the site's node health check; a non-zero exit fails the
# host, with its last line as the evidence; exit 126/127 (not executable, not found) is a configuration error named
# once, never a reason to evict.  Empty: none.
SITE_SWEEP_CHECK=""
# Directories every compute node must have readable (shared filesystems the job needs); the run directory is always
# checked.  Empty: only the run directory.
SITE_SWEEP_MOUNTS=(/lus/proj)
# May a job go on with fewer nodes when a node fails and no spare is left (0 | 1)?  1: the failover loop
# relaunches on the healthy nodes when the global batch is kept (FAILOVER_SHRINK, FAILOVER_MIN_NODES;
# docs/recovery.md); 0 where the site's policy or accounting forbids a job that runs below its node count.
SITE_FAILOVER_SHRINK=1
