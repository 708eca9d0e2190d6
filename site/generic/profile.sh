# shellcheck shell=bash disable=SC2034
# site/generic: any machine (a laptop, a workstation, a CI runner): no scheduler, MPICH hydra on localhost,
# the current python (the checkout's .venv), every failure-pattern set.  Keys: site/_template/profile.sh.
SITE_NAME=generic
SITE_DESCRIPTION="Any host: no scheduler, MPICH hydra mpiexec on localhost, the current python"
SITE_HOSTNAME_RE='.*'

SITE_SCHEDULER=none
SITE_QUEUE=""
SITE_ACCOUNT=""
SITE_FILESYSTEMS=""
SITE_DIRECTIVES=()

SITE_GPUS_PER_NODE=0
SITE_RANKS_PER_NODE=1
# Unknown hardware: no MFU (set it to your device's peak dense bf16 TFLOPS to get one).
SITE_PEAK_TFLOPS=""
# Any host: device memory unknown, so `agpt check` skips the memory check.
SITE_DEVICE_MEM_GIB=0
# Any host: host memory unknown, so `agpt check` skips the local tier's memory screen.
SITE_HOST_MEM_GIB=0
# A node's mean time between failures in hours, for the checkpoint intervals `agpt check` chooses at job start:
# the AuroraGPT talks' "each node ... fails on average once a year" (set this site's own figure when its logs
# give one; Llama 3's 2,048-node snapshot gives 6,335 h, arXiv:2407.21783 section 3.3.4).
SITE_NODE_MTBF_H=8760
# A local disk, roughly.
SITE_FS_BW_GBPS=1
SITE_LAUNCHER=hydra
SITE_LAUNCHER_FLAGS=()
SITE_CPU_BIND=""

SITE_MODULES=()
SITE_ENV=()
SITE_LOCAL_DIR="${TMPDIR:-/tmp}"
# The local checkpoint tier's node-local memory folder (checkpoint.local_interval; a tmpfs); empty: /dev/shm.
SITE_LOCAL_CKPT_DIR=""
# A node's failure domain (the local checkpoint tier's partner): node names here carry no place; empty: every
# node its own domain, copies in a ring over the nodes.
SITE_FAILURE_DOMAIN_RE=""

SITE_PYTHON=python3
SITE_VENV_DIR=""
SITE_STAGE=none
SITE_STAGE_OPTS=()
# No container runtime assumed on an arbitrary host; keys: site/_template/profile.sh.
SITE_CONTAINER=none
SITE_CONTAINER_OPTS=()
SITE_CONTAINER_MODULES=()
SITE_CKPT_LAYOUT=()

SITE_SPARES_PERCENT=0
SITE_SPARES_MIN=0
SITE_FAILOVER_PATTERNS=(pals hydra openmpi srun cuda level_zero rocm gloo oneccl torch system app cascade)
# Health sweep after an unexplained failure (site/_template/profile.sh documents these keys).
SITE_SWEEP=full
SITE_SWEEP_CHECK=""
SITE_SWEEP_MOUNTS=()
SITE_FAILOVER_SHRINK=1
