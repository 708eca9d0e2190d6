# shellcheck shell=bash disable=SC2034
# site/perlmutter: NERSC Perlmutter GPU nodes (HPE Cray EX; 4 NVIDIA A100 and one 64-core AMD EPYC per
# node; Slurm; srun).  NERSC's "queue" is a QOS: it is a directive here, and the GPU partition is picked
# by the constraint.  Keys: site/_template/profile.sh.
SITE_NAME=perlmutter
SITE_DESCRIPTION="NERSC Perlmutter GPU: Slurm, srun, 4 NVIDIA A100 per node"
SITE_HOSTNAME_RE='(perlmutter|\.nersc\.gov$|^nid[0-9]{6}$)'

SITE_SCHEDULER=slurm
SITE_QUEUE=""
SITE_ACCOUNT=""
SITE_FILESYSTEMS=scratch
SITE_DIRECTIVES=("--constraint=gpu" "--qos=regular" "--gpus-per-node=4")

SITE_GPUS_PER_NODE=4
SITE_RANKS_PER_NODE=4
# NVIDIA A100 SXM4: 312 TFLOPS BF16 dense (NVIDIA A100 datasheet,
# https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf).
SITE_PEAK_TFLOPS=312
# 1,536 GPU nodes with A100 40GB (256 more with 80GB: set 80 for `-C gpu&hbm80g`)
# (NERSC, https://docs.nersc.gov/systems/perlmutter/architecture).
SITE_DEVICE_MEM_GIB=40
# 256 GB of DDR4 per GPU node (NERSC, Perlmutter architecture, as above).
SITE_HOST_MEM_GIB=256
# A node's mean time between failures in hours, for the checkpoint intervals `agpt check` chooses at job start:
# the AuroraGPT talks' "each node ... fails on average once a year" (set this site's own figure when its logs
# give one; Llama 3's 2,048-node snapshot gives 6,335 h, arXiv:2407.21783 section 3.3.4).
SITE_NODE_MTBF_H=8760
# All-flash Lustre scratch, "more than 5 terabytes/sec"
# (https://webarchive.library.unt.edu/web/20201218030734/https://www.nersc.gov/systems/perlmutter).
SITE_FS_BW_GBPS=5000
SITE_LAUNCHER=srun
SITE_LAUNCHER_FLAGS=(--cpus-per-task=32 --gpus-per-node=4)
SITE_CPU_BIND=cores

SITE_MODULES=(pytorch/2.6.0)
SITE_ENV=(
  "NCCL_NET_GDR_LEVEL=PHB"
  "NCCL_CROSS_NIC=1"
  "FI_MR_CACHE_MONITOR=userfaultfd"
  "FI_CXI_DEFAULT_CQ_SIZE=131072"
  "OMP_NUM_THREADS=8"
)
SITE_LOCAL_DIR=/tmp
# The local checkpoint tier's node-local memory folder (checkpoint.local_interval; a tmpfs); empty: /dev/shm.
SITE_LOCAL_CKPT_DIR=""
# A node's failure domain (the local checkpoint tier's partner): node names here carry no place; empty: every
# node its own domain, copies in a ring over the nodes.
SITE_FAILURE_DOMAIN_RE=""

SITE_PYTHON=python3
SITE_VENV_DIR="${HOME}/venvs/perlmutter"
# agpt yeet to node-local /tmp: NERSC's answer for Python at scale is a container image (below), which needs no
# staging; for a venv on $SCRATCH/$HOME, yeet (assumption: NERSC documents no broadcast tool for a venv).
SITE_STAGE=yeet
SITE_STAGE_OPTS=()
# Shifter: "NERSC has developed and supports Shifter to enable users to securely run Docker images on NERSC systems
# at scale" (https://docs.nersc.gov/development/containers/shifter/); `shifter --image=IMAGE --volume=SRC:DST CMD`
# (https://shifter.readthedocs.io/en/latest/command/shifter.html).  --module=gpu: assumption, the GPU module as named
# in NERSC's Shifter examples (not found by search).  podman-hpc is NERSC's other runtime
# (https://github.com/NERSC/podman-hpc): SITE_CONTAINER=podman-hpc, SITE_CONTAINER_OPTS=(--gpu).
SITE_CONTAINER=shifter
SITE_CONTAINER_OPTS=(--module=gpu)
SITE_CONTAINER_MODULES=()
# Perlmutter scratch's progressive file layout as NERSC documents it: 1 OST up to 1 GB, 8 to 10 GB, 24 to 100 GB, 72
# beyond (https://docs.nersc.gov/filesystems/perlmutter-scratch/, "Default File Striping"; stripe_small/medium/large
# are 8/24/72 OSTs: https://docs.nersc.gov/performance/io/lustre/), set on the checkpoint directory so every shard
# gets it whatever the scratch default of the day is (today's docs: one OST).
SITE_CKPT_LAYOUT=(lustre -E 1G -c 1 -E 10G -c 8 -E 100G -c 24 -E -1 -c 72)

SITE_SPARES_PERCENT=2
SITE_SPARES_MIN=2
SITE_FAILOVER_PATTERNS=(srun cuda gloo torch system app cascade)
# Health sweep after an unexplained failure (site/_template/profile.sh documents these keys).
SITE_SWEEP=full
SITE_SWEEP_CHECK=""
SITE_SWEEP_MOUNTS=()
SITE_FAILOVER_SHRINK=1
