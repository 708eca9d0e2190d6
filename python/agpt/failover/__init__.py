"""NODE layer: classify failed attempts, decide swaps, report a run's recovery timeline.

Standard library only (the recovery path must start when the training environment is broken).
"""
