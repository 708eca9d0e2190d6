# shellcheck shell=bash disable=SC2034
# site/sunspot: ALCF Sunspot, the Aurora test and development system (same node: 12 Intel GPU tiles; PBS
# Professional; PALS mpiexec).  Keys: site/_template/profile.sh.
SITE_NAME=sunspot
SITE_DESCRIPTION="ALCF Sunspot (Aurora TDS): PBS, PALS mpiexec, 12 Intel GPU tiles per node"
SITE_HOSTNAME_RE='^(uan-000[0-9]|x19[0-9]{2}c[0-9]+s[0-9]+b[0-9]+n[0-9]+)'

SITE_SCHEDULER=pbs
SITE_QUEUE=workq
SITE_ACCOUNT=""
SITE_FILESYSTEMS=flare:home
SITE_DIRECTIVES=("-l place=scatter" "-k doe" "-j oe")

SITE_GPUS_PER_NODE=12
SITE_RANKS_PER_NODE=12
# One rank per GPU tile: Intel Data Center GPU Max 1550, 839 TFLOPS FP16/BF16 (XMX) per 2-tile GPU as
# presented at Hot Chips 34 (https://www.svethardware.cz/intel-ponte-vecchio-prekona-nvidii-a100-a-prinese-408-mb-l2-cache/58281),
# so 419.5 per tile.
SITE_PEAK_TFLOPS=419.5
# Aurora's node (6 Max 1550 GPUs x 2 tiles, 768 GiB HBM2e): 64 GiB per rank
# (https://argonne-lcf.github.io/user-guides/aurora/hardware-overview/machine-overview).
SITE_DEVICE_MEM_GIB=64
# Aurora's node: 1 TiB of DDR5 (the Aurora machine overview, as above).
SITE_HOST_MEM_GIB=1024
# A node's mean time between failures in hours, for the checkpoint intervals `agpt check` chooses at job start:
# the AuroraGPT talks' "each node ... fails on average once a year" (set this site's own figure when its logs
# give one; Llama 3's 2,048-node snapshot gives 6,335 h, arXiv:2407.21783 section 3.3.4).
SITE_NODE_MTBF_H=8760
# Sunspot's test filesystem publishes no bandwidth; 100 GB/s is a conservative guess for a test rack.
SITE_FS_BW_GBPS=100
SITE_LAUNCHER=pals
SITE_LAUNCHER_FLAGS=(--genvall)
SITE_CPU_BIND="list:1-8:9-16:17-24:25-32:33-40:41-48:53-60:61-68:69-76:77-84:85-92:93-100"

SITE_MODULES=(frameworks)
SITE_ENV=(
  "ZE_FLAT_DEVICE_HIERARCHY=FLAT"
  "CCL_PROCESS_LAUNCHER=pmix"
  "CCL_ATL_TRANSPORT=mpi"
  "CCL_KVS_MODE=mpi"
  "CCL_CONFIGURATION_PATH="
  "CCL_CONFIGURATION=cpu_gpu_dpcpp"
  "FI_CXI_DEFAULT_CQ_SIZE=1048576"
)
SITE_LOCAL_DIR=/tmp
# The local checkpoint tier's node-local memory folder (checkpoint.local_interval; a tmpfs); empty: /dev/shm.
SITE_LOCAL_CKPT_DIR=""
# A node's failure domain, for the local checkpoint tier's partner: HPE Cray EX names a node by its place
# (xCABINETcCHASSISsSLOTbBOARDnNODE, HPE's "component names (xnames)"); assumption: nodes of one blade (up to
# the slot) share its power and cooling, so each node's copy goes to another blade.  '^(x[0-9]+c[0-9]+)' moves
# copies to another chassis.
SITE_FAILURE_DOMAIN_RE='^(x[0-9]+c[0-9]+s[0-9]+)'

SITE_PYTHON=python3
SITE_VENV_DIR="${HOME}/venvs/sunspot"
# The test and development system keeps agpt yeet (Copper is documented for Aurora at scale); no container, the
# filesystem's default layout (keys: site/_template/profile.sh).
SITE_STAGE=yeet
SITE_STAGE_OPTS=()
SITE_CONTAINER=none
SITE_CONTAINER_OPTS=()
SITE_CONTAINER_MODULES=()
SITE_CKPT_LAYOUT=()

SITE_SPARES_PERCENT=2
SITE_SPARES_MIN=1
SITE_FAILOVER_PATTERNS=(pals level_zero oneccl torch system app cascade)
# Health sweep after an unexplained failure (site/_template/profile.sh documents these keys).
SITE_SWEEP=full
SITE_SWEEP_CHECK=""
SITE_SWEEP_MOUNTS=()
SITE_FAILOVER_SHRINK=1
