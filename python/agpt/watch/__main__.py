"""`python3 -m agpt.watch`: what `agpt watch` runs, with the standard library alone."""

from __future__ import annotations

import sys

from agpt.watch.cli import main

sys.exit(main())
