"""Where operators look: TensorBoard and W&B files, Prometheus text metrics, `agpt monitor`, `agpt report --html`.

Everything is read from, or written into, the run directory (docs/observability.md).  `status`, `prom` and
`markers` use the standard library only, so the failover loop can rewrite RUN_DIR/metrics.prom from Bash
(`python -m agpt.observe.prom RUN_DIR`) when the training environment is what broke; the writers that need a
library (`tb`: tensorboardX, `wb`: wandb) and the views (`monitor`: rich, `html`: matplotlib) import it inside.
"""
