# shellcheck shell=bash disable=SC2034
# site/aurora: ALCF Aurora (HPE Cray EX; 6 Intel Data Center GPU Max 1550 = 12 tiles and 2 Xeon Max per
# node; PBS Professional; PALS mpiexec; Slingshot 11).  Values from ALCF's user guide; keys:
# site/_template/profile.sh.
SITE_NAME=aurora
SITE_DESCRIPTION="ALCF Aurora: PBS, PALS mpiexec, 12 Intel GPU tiles per node"
SITE_HOSTNAME_RE='^(aurora-uan-[0-9]+|x4[0-9]{3}c[0-9]+s[0-9]+b[0-9]+n[0-9]+)'

SITE_SCHEDULER=pbs
SITE_QUEUE=prod
SITE_ACCOUNT=""
SITE_FILESYSTEMS=flare:home
SITE_DIRECTIVES=("-l place=scatter" "-k doe" "-j oe")

SITE_GPUS_PER_NODE=12
SITE_RANKS_PER_NODE=12
# One rank per GPU tile: Intel Data Center GPU Max 1550, 839 TFLOPS FP16/BF16 (XMX) per 2-tile GPU as
# presented at Hot Chips 34 (https://www.svethardware.cz/intel-ponte-vecchio-prekona-nvidii-a100-a-prinese-408-mb-l2-cache/58281),
# so 419.5 per tile.
SITE_PEAK_TFLOPS=419.5
# 768 GiB of HBM2e per node over 6 GPUs x 2 tiles = 64 GiB per rank (ALCF, Aurora machine overview:
# https://argonne-lcf.github.io/user-guides/aurora/hardware-overview/machine-overview).
SITE_DEVICE_MEM_GIB=64
# 1 TiB of DDR5 per node: 2 Xeon Max CPUs x 512 GB (ALCF, Aurora machine overview, as above).
SITE_HOST_MEM_GIB=1024
# A node's mean time between failures in hours, for the checkpoint intervals `agpt check` chooses at job start:
# the AuroraGPT talks' "each node ... fails on average once a year" (set this site's own figure when its logs
# give one; Llama 3's 2,048-node snapshot gives 6,335 h, arXiv:2407.21783 section 3.3.4).
SITE_NODE_MTBF_H=8760
# Flare: 91 PB of Lustre, 160 OSTs, "peak theoretical performance of 650 GB/s" (ALCF, Flare:
# https://docs.alcf.anl.gov/aurora/data-management/lustre/flare/).
SITE_FS_BW_GBPS=650
SITE_LAUNCHER=pals
SITE_LAUNCHER_FLAGS=(--genvall)
# One rank per GPU tile, each on its own 8 cores, skipping the cores the OS uses (0 and 52 per socket).
SITE_CPU_BIND="list:1-8:9-16:17-24:25-32:33-40:41-48:53-60:61-68:69-76:77-84:85-92:93-100"

# copper: ALCF's Copper (SITE_STAGE below), "module load copper"
# (https://docs.alcf.anl.gov/aurora/data-management/copper/copper/).
SITE_MODULES=(frameworks copper)
# oneCCL and the Slingshot provider: ALCF's settings "that typically provide better performance or address potential
# application hangs and crashes at large scale" (the minimal set, tested to 1,024 nodes, then the tuning lists), from
# https://docs.alcf.anl.gov/aurora/data-science/frameworks/oneCCL/ ; CCL_ATL_SYNC_COLL and CCL_OP_SYNC are the two it
# marks "to avoid potential hang at large scale", PALS_PING_PERIOD/PALS_RPC_TIMEOUT keep PALS from giving up on a
# busy node.  FI_MR_CACHE_MONITOR=disabled is that page's application-dependent list (its minimal set has
# userfaultfd).
SITE_ENV=(
  "ZE_FLAT_DEVICE_HIERARCHY=FLAT"
  "CCL_PROCESS_LAUNCHER=pmix"
  "CCL_ATL_TRANSPORT=mpi"
  "CCL_KVS_MODE=mpi"
  "CCL_KVS_CONNECTION_TIMEOUT=600"
  "CCL_KVS_USE_MPI_RANKS=1"
  "CCL_CONFIGURATION_PATH="
  "CCL_CONFIGURATION=cpu_gpu_dpcpp"
  "CCL_ALLREDUCE_SCALEOUT=direct:0-1048576;rabenseifner:1048577-max"
  "CCL_BCAST=double_tree"
  "CCL_ZE_CACHE_OPEN_IPC_HANDLES_THRESHOLD=1024"
  "CCL_ATL_SYNC_COLL=1"
  "CCL_OP_SYNC=1"
  "FI_CXI_DEFAULT_CQ_SIZE=1048576"
  "FI_CXI_RX_MATCH_MODE=hybrid"
  "FI_CXI_OFLOW_BUF_SIZE=8388608"
  "FI_CXI_CQ_FILL_PERCENT=30"
  "FI_MR_CACHE_MONITOR=disabled"
  "PALS_PING_PERIOD=240"
  "PALS_RPC_TIMEOUT=240"
  "TORCH_XPU_ALLOC_CONF=expandable_segments:True"
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
SITE_VENV_DIR="${HOME}/venvs/aurora"
# Copper: "It is recommended to use copper for any applications [preferrably python and I/O <500 MB] in order to scale
# beyond 2k nodes"; launch_copper.sh starts it on every node of the job, the venv is read through
# /tmp/$USER/copper_mount/<its path> (ALCF's "common mount path"; SITE_LOCAL_DIR=/tmp)
# (https://docs.alcf.anl.gov/aurora/data-management/copper/copper/).
SITE_STAGE=copper
SITE_STAGE_OPTS=()
# Apptainer: "module load apptainer", images run as unprivileged containers, `apptainer exec -B DIR:DIR IMAGE CMD`
# under mpiexec (https://docs.alcf.anl.gov/aurora/containers/containers/).
SITE_CONTAINER=apptainer
SITE_CONTAINER_OPTS=()
SITE_CONTAINER_MODULES=(apptainer)
# Checkpoints on Flare (160 OSTs): ALCF publishes no striping advice for it; the trainer writes one file per rank, for
# which NERSC and OLCF advise the default layout (https://docs.nersc.gov/performance/io/lustre/, "File per process:
# keep default striping"; OLCF: "refrain from attempting to manually control file striping, unless ... single files
# in excess of 512 GB", https://docs.olcf.ornl.gov/data/index.html): assumption, Flare's default.  A run directory on
# a dfuse-mounted DAOS container instead: (daos --oclass=EC_16P3G32) (ALCF's recommended rd_fac:3 erasure code for
# file per process), with "LD_PRELOAD=/usr/lib64/libpil4dfs.so" in job.env (the interception library ALCF prefers)
# (https://docs.alcf.anl.gov/aurora/data-management/daos/daos-overview/).
SITE_CKPT_LAYOUT=()

SITE_SPARES_PERCENT=2
SITE_SPARES_MIN=4
SITE_FAILOVER_PATTERNS=(pals level_zero oneccl torch system app cascade)
# Health sweep after an unexplained failure (site/_template/profile.sh documents these keys).
SITE_SWEEP=full
SITE_SWEEP_CHECK=""
SITE_SWEEP_MOUNTS=()
SITE_FAILOVER_SHRINK=1
