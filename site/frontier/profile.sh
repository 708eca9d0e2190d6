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
# --constraint=nvme: the node-local NVMe at /mnt/bb/$USER that sbcast fills (SITE_STAGE below);
# --network=disable_rdzv_get: the alternative rendezvous protocol that "improves RCCL performance at large scales",
# with FI_CXI_RDZV_PROTO=alt_read in SITE_ENV
# (https://docs.olcf.ornl.gov/software/analytics/pytorch_frontier.html, "Alternative Rendezvous Protocol").
SITE_DIRECTIVES=("--constraint=nvme" "--network=disable_rdzv_get")

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
# A node's mean time between failures in hours, for the checkpoint intervals `agpt check` chooses at job start:
# the AuroraGPT talks' "each node ... fails on average once a year" (set this site's own figure when its logs
# give one; Llama 3's 2,048-node snapshot gives 6,335 h, arXiv:2407.21783 section 3.3.4).
SITE_NODE_MTBF_H=8760
# Orion: files past 8 MB (checkpoints) land on its disk tier, peak write 4.6 TB/s (OLCF's Orion specs:
# https://insidehpc.com/2021/05/olcf-releases-storage-specs-for-frontier-exascale/).
SITE_FS_BW_GBPS=4600
SITE_LAUNCHER=srun
SITE_LAUNCHER_FLAGS=(--cpus-per-task=7 --gpus-per-task=1 --gpu-bind=closest)
SITE_CPU_BIND=threads

# rccl-net-plugin: "Load the rccl-net-plugin module to configure your environment to use the external network plugin
# and tune the Slingshot network stack for RCCL" (aws-ofi-rccl; the Frontier user guide, RCCL:
# https://docs.olcf.ornl.gov/systems/frontier_user_guide.html), after rocm.
SITE_MODULES=(PrgEnv-gnu rocm/6.2.4 rccl-net-plugin craype-accel-amd-gfx90a miniforge3)
SITE_ENV=(
  "FI_CXI_RDZV_PROTO=alt_read"
  "NCCL_SOCKET_IFNAME=hsn0"
  "NCCL_NET_GDR_LEVEL=3"
  "FI_CXI_ATS=0"
  "FI_MR_CACHE_MONITOR=userfaultfd"
  "MIOPEN_USER_DB_PATH=/tmp/miopen-cache"
  "MIOPEN_CUSTOM_CACHE_DIR=/tmp/miopen-cache"
  "OMP_NUM_THREADS=7"
)
# The node-local NVMe, with --constraint=nvme (https://docs.olcf.ornl.gov/software/python/sbcast_conda.html).
SITE_LOCAL_DIR="/mnt/bb/${USER:-}"
# The local checkpoint tier's node-local memory folder (checkpoint.local_interval; a tmpfs); empty: /dev/shm.
SITE_LOCAL_CKPT_DIR=""
# A node's failure domain (the local checkpoint tier's partner): node names here carry no place; empty: every
# node its own domain, copies in a ring over the nodes.
SITE_FAILURE_DOMAIN_RE=""

SITE_PYTHON=python3
SITE_VENV_DIR="${HOME}/venvs/frontier"
# sbcast of a packed environment to the NVMe: OLCF's guide measured its script start at 2 s from the NVMe against 51 s
# from Orion (Lustre) at 8 nodes, "likely [more] benefit as the node count increases"
# (https://docs.olcf.ornl.gov/software/python/sbcast_conda.html).
SITE_STAGE=sbcast
SITE_STAGE_OPTS=()
# Apptainer with OLCF's modules that bind the host's MPI and ROCm ("experimental"): olcf-container-tools,
# apptainer-enable-mpi, apptainer-enable-gpu (https://docs.olcf.ornl.gov/software/containers_on_frontier.html).
SITE_CONTAINER=apptainer
SITE_CONTAINER_OPTS=()
SITE_CONTAINER_MODULES=(olcf-container-tools apptainer-enable-mpi apptainer-enable-gpu)
# Orion: PFL and Data-on-MDT by default; OLCF asks users to "refrain from attempting to manually control file
# striping, unless they are writing single files in excess of 512 GB" (https://docs.olcf.ornl.gov/data/index.html);
# the trainer writes one file per rank: the default.
SITE_CKPT_LAYOUT=()

SITE_SPARES_PERCENT=2
SITE_SPARES_MIN=2
SITE_FAILOVER_PATTERNS=(srun rocm gloo torch system app cascade)
# Health sweep after an unexplained failure (site/_template/profile.sh documents these keys).
SITE_SWEEP=full
SITE_SWEEP_CHECK=""
SITE_SWEEP_MOUNTS=()
SITE_FAILOVER_SHRINK=1
