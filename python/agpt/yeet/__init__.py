"""`agpt yeet`: stage a venv, checkpoint or data set on every node's local storage.

Reading an environment off a parallel filesystem file by file costs thousands of metadata operations per
node; reading it once as a tarball and fanning the bytes out node to node costs one sequential read.
Modules, one concern each:

- `pack`: a directory becomes one zstd tarball, cached beside it, reused only while its fingerprint matches.
- `extract`: streaming, refusing extraction into `DEST.tmp.<id>`, then an atomic replace of DEST.
- `relocate`: a staged venv's activate scripts, `pyvenv.cfg` and shebangs point at DEST.
- `node`: what every node does with a stream of tarball bytes (stage, verify, relocate, check).
- `mpi`: rank 0 reads chunks and broadcasts them; every rank extracts while later chunks arrive.
- `ssh`: a greedy fan-out tree over ssh for when no MPI is at hand.
- `report`: per-node results, `--min-success`, and `DEST/.yeet-failed-hosts`.
"""

from __future__ import annotations
