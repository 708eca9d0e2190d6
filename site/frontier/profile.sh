# shellcheck shell=bash disable=SC2034
# site/frontier: OLCF Frontier (HPE Cray EX; 4 AMD MI250X = 8 GCDs and one 64-core AMD EPYC per node;
# Slurm; srun).  Keys: site/_template/profile.sh.
SITE_NAME=frontier
SITE_DESCRIPTION="OLCF Frontier: Slurm, srun, 8 AMD MI250X GCDs per node"
SITE_HOSTNAME_RE='(^frontier[0-9]{5}|\.frontier\.olcf\.ornl\.gov$)'

SITE_SCHEDULER=slurm
SITE_QUEUE="batch"
SITE_ACCOUNT=""
SITE_FILESYSTEMS=""
SITE_DIRECTIVES=()

SITE_GPUS_PER_NODE=8
SITE_RANKS_PER_NODE=8
# One rank per GCD: AMD Instinct MI250X, 383 TFLOPS BF16 per 2-GCD module (AMD's MI200 launch figures,
# https://zexron.com/amd-mi250-x-aldebaran-as-mcm-with-up-to-479-teraflop-s-and-560-watt-tdp), so 191.5 per GCD.
SITE_PEAK_TFLOPS=191.5
# MI250X: 128 GB HBM2e = 64 GB per GCD, each GCD its own GPU and rank
# (https://glennklockwood.com/garden/systems/frontier, after the Frontier user guide).
SITE_DEVICE_MEM_GIB=64
# 512 GB of DDR4 per node (the Frontier user guide: https://docs.olcf.ornl.gov/systems/frontier_user_guide.html).
SITE_HOST_MEM_GIB=512
# Orion: files past 8 MB (checkpoints) land on its disk tier, peak write 4.6 TB/s (OLCF's Orion specs:
# https://insidehpc.com/2021/05/olcf-releases-storage-specs-for-frontier-exascale/).
SITE_FS_BW_GBPS=4600
SITE_LAUNCHER=srun
SITE_LAUNCHER_FLAGS=(--cpus-per-task=7 --gpus-per-task=1 --gpu-bind=closest)
SITE_CPU_BIND=threads

SITE_MODULES=(PrgEnv-gnu rocm/6.2.4 craype-accel-amd-gfx90a miniforge3)
SITE_ENV=(
  "NCCL_SOCKET_IFNAME=hsn0"
  "NCCL_NET_GDR_LEVEL=3"
  "FI_CXI_ATS=0"
  "FI_MR_CACHE_MONITOR=userfaultfd"
  "MIOPEN_USER_DB_PATH=/tmp/miopen-cache"
  "MIOPEN_CUSTOM_CACHE_DIR=/tmp/miopen-cache"
  "OMP_NUM_THREADS=7"
)
SITE_LOCAL_DIR=/tmp
# The local checkpoint tier's node-local memory folder (checkpoint.local_interval; a tmpfs); empty: /dev/shm.
SITE_LOCAL_CKPT_DIR=""
# A node's failure domain (the local checkpoint tier's partner): node names here carry no place; empty: every
# node its own domain, copies in a ring over the nodes.
SITE_FAILURE_DOMAIN_RE=""

SITE_PYTHON=python3
SITE_VENV_DIR="${HOME}/venvs/frontier"
SITE_VENV_STAGE=1

SITE_SPARES_PERCENT=2
SITE_SPARES_MIN=2
SITE_FAILOVER_PATTERNS=(srun rocm gloo torch system app cascade)
SITE_FAILOVER_SHRINK=1
