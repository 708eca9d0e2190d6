"""`agpt sim`: goodput at scale, by running the real recovery decisions on a virtual clock.

Modules: `model` (the fault model YAML and its defaults), `logs` (attempt logs in each launcher's format),
`engine` (the discrete-event simulation; its ratios are agpt.goodput's), `sweep` (the
512-4,096-node table and its figure).  Importing this package does not import torch.
"""
