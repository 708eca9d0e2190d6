"""`agpt watch`: kill a command whose output goes idle, and re-run it a bounded number of times.

Why: a collective hang makes every rank block in the same call; the job stays alive by `kill -0`, its output goes
silent, and it burns the whole allocation, while some collective backends ignore their own timeouts.  Silence on
stdout/stderr is the signal we can act on from outside.

On the recovery path: standard library only, so it starts in milliseconds even when the training environment is
what broke (`python3 -m agpt.watch` works without the venv).  The modules, from the command line down:
  cli       the options (argparse), one line and exit 2 for a bad one
  run       run_settings / watch: the retries and their backoff, AGPT_WATCH_ATTEMPT
  attempt   one run of CMD: the poll loop and its states (run, drain, term, killed)
  idle      the idle deadlines: no output, the progress file, the startup limit until the first progress line
  evidence  kill on evidence: a launcher's node-failure or task-death line (--kill-on), a host the heartbeats
            show stopped (--heartbeat-dir); SIGKILL after --evidence-grace, not --grace
  child     CMD in its own session and process group, on two pipes
  output    the pass-through to stdout/stderr and --log (splice(2) when nothing needs the bytes), the progress
            regex on what passes, and watch's own lines
  signals   forwarded signals and SIGCHLD, through a self-pipe that wakes the poll loop
  settings  WatchSettings and Outcome
"""
