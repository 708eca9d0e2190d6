"""Heartbeats: where every rank is, published by the trainer, read back by the recovery path.

  format     the one definition: version, files in the run directory, phases, record fields
  writer     what a trainer runs: one record per rank, one file per node per interval (Heartbeat, start)
  reader     the records read back: which host hung a job (attribute), the straggler swap request
  straggler  rank 0's monitor: a host slower than its peers, reported or swapped

Standard library only: the writer runs inside any trainer, the reader when the training environment is broken.
"""
