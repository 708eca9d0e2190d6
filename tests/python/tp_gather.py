"""One rank of test_train_tp.py's layout check: resume a run at the layout of CONFIG and SETS, gather every
parameter and compare it with the checkpoint as saved; rank 0 prints one `layout ...` line.

Usage (under mpiexec): python tp_gather.py CONFIG RUN_DIR [SET ...], or, a fork of the trainer tests' server
(agpt_zygote.py, whose folder is on its sys.path): python -S agpt_zygote.py -m tp_gather CONFIG RUN_DIR [SET ...]
"""

import os
import sys
from pathlib import Path

import torch

from agpt.train import dist
from agpt.train.config import load_config
from agpt.train.trainer import Trainer

cfg = load_config(sys.argv[1], sys.argv[3:], environ={})
run = Path(sys.argv[2])
t = Trainer(cfg, run)
path = t.resume()
full = {}
for name, p in t.model.named_parameters():
    full[name] = (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().cpu()
if t.rank == 0:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(path, run / "saved.pt")
    saved = torch.load(run / "saved.pt", weights_only=False)["model"]
    bad = [n for n in full if not torch.equal(full[n], saved[n])]
    same = sorted(full) == sorted(saved)
    print(f"layout dp={t.dp} tp={t.layout.tp} same_names={same} differ={bad}", flush=True)
dist.finish()
os._exit(0)
