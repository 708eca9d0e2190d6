# shellcheck shell=bash disable=SC2034
# site/polaris: ALCF Polaris (HPE Apollo 6500; 4 NVIDIA A100 and one 32-core AMD EPYC per node; PBS
# Professional; PALS mpiexec).  The conda module needs `module use /soft/modulefiles` first: see hooks/.
# Keys: site/_template/profile.sh.
SITE_NAME=polaris
SITE_DESCRIPTION="ALCF Polaris: PBS, PALS mpiexec, 4 NVIDIA A100 per node"
SITE_HOSTNAME_RE='^(polaris-login-[0-9]+|x3[0-9]{3}c[0-9]+s[0-9]+b[0-9]+n[0-9]+)'

SITE_SCHEDULER=pbs
SITE_QUEUE=prod
SITE_ACCOUNT=""
SITE_FILESYSTEMS=home:eagle
SITE_DIRECTIVES=("-l place=scatter" "-k doe" "-j oe")

SITE_GPUS_PER_NODE=4
SITE_RANKS_PER_NODE=4
# NVIDIA A100 SXM4: 312 TFLOPS BF16 dense (NVIDIA A100 datasheet,
# https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf).
SITE_PEAK_TFLOPS=312
# NVIDIA A100 with 40 GiB HBM2 each (ALCF, Polaris machine overview:
# https://docs.alcf.anl.gov/polaris/hardware-overview/machine-overview).
SITE_DEVICE_MEM_GIB=40
# 512 GB of DDR4 per node (ALCF, Polaris machine overview, as above).
SITE_HOST_MEM_GIB=512
# A node's mean time between failures in hours, for the checkpoint intervals `agpt check` chooses at job start:
# the AuroraGPT talks' "each node ... fails on average once a year" (set this site's own figure when its logs
# give one; Llama 3's 2,048-node snapshot gives 6,335 h, arXiv:2407.21783 section 3.3.4).
SITE_NODE_MTBF_H=8760
# Eagle and Grand: Lustre on HPE ClusterStor E1000, aggregate 650 GB/s
# (https://alcf.anl.gov/alcf-resources/storage-and-networking).
SITE_FS_BW_GBPS=650
SITE_LAUNCHER=pals
SITE_LAUNCHER_FLAGS=(--depth=8 --env OMP_NUM_THREADS=8)
SITE_CPU_BIND=depth

SITE_MODULES=(conda)
SITE_ENV=(
  "NCCL_NET_GDR_LEVEL=PHB"
  "NCCL_CROSS_NIC=1"
  "NCCL_COLLNET_ENABLE=1"
  "NCCL_NET=AWS Libfabric"
  "FI_CXI_DISABLE_HOST_REGISTER=1"
  "FI_MR_CACHE_MONITOR=userfaultfd"
  "FI_CXI_DEFAULT_CQ_SIZE=131072"
)
SITE_LOCAL_DIR=/local/scratch
# The local checkpoint tier's node-local memory folder (checkpoint.local_interval; a tmpfs); empty: /dev/shm.
SITE_LOCAL_CKPT_DIR=""
# A node's failure domain, for the local checkpoint tier's partner: HPE Cray EX names a node by its place
# (xCABINETcCHASSISsSLOTbBOARDnNODE, HPE's "component names (xnames)"); assumption: nodes of one blade (up to
# the slot) share its power and cooling, so each node's copy goes to another blade.  '^(x[0-9]+c[0-9]+)' moves
# copies to another chassis.
SITE_FAILURE_DOMAIN_RE='^(x[0-9]+c[0-9]+s[0-9]+)'

SITE_PYTHON=python3
SITE_VENV_DIR="${HOME}/venvs/polaris"
# agpt yeet to /local/scratch: ALCF documents no staging tool for Polaris (Copper is Aurora's); assumption.
SITE_STAGE=yeet
SITE_STAGE_OPTS=()
# "Polaris uses Apptainer (formerly Singularity) for container management ... ml apptainer"
# (https://docs.alcf.anl.gov/polaris/containers/containers/); --nv: Apptainer's NVIDIA GPU support
# (https://apptainer.org/docs/user/latest/gpu.html).
SITE_CONTAINER=apptainer
SITE_CONTAINER_OPTS=(--nv)
SITE_CONTAINER_MODULES=(apptainer)
# Eagle and Grand: ALCF publishes no striping advice; one file per rank keeps the default (as for Aurora's Flare:
# site/aurora/profile.sh); assumption.
SITE_CKPT_LAYOUT=()

SITE_SPARES_PERCENT=2
SITE_SPARES_MIN=2
SITE_FAILOVER_PATTERNS=(pals cuda torch system app cascade)
# Health sweep after an unexplained failure (site/_template/profile.sh documents these keys).
SITE_SWEEP=full
SITE_SWEEP_CHECK=""
SITE_SWEEP_MOUNTS=()
SITE_FAILOVER_SHRINK=1
