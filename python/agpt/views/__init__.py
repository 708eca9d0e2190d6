"""What operators look at, read from the run directory: `agpt monitor` (`monitor`) and `agpt report --html`
(`html`), above the failover report and the plots they reuse.  The files they read are written by
`agpt.observe` (docs/observability.md).
"""
