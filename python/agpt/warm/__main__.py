"""`agpt warm serve [--slots K] -- CMD` | `agpt warm claim -- CMD` (agpt.warm)."""

from __future__ import annotations

import os
import sys

USAGE = "usage: agpt warm serve [--slots K] -- agpt train ... | agpt warm claim -- agpt train ..."


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        print((__import__("agpt.warm").warm.__doc__ or "").strip())
        return 0 if argv else 2
    what, rest = argv[0], argv[1:]
    cmd = rest[rest.index("--") + 1 :] if "--" in rest else []
    opts = rest[: rest.index("--")] if "--" in rest else rest
    if what == "claim":
        from agpt.warm.claim import claim

        return claim(cmd)
    if what == "serve":
        slots = os.environ.get("LAUNCH_PPN") or os.environ.get("SITE_RANKS_PER_NODE") or "1"
        if opts[:1] == ["--slots"] and len(opts) == 2:
            slots = opts[1]
        elif opts:
            print(f"agpt warm serve: error: unexpected {opts[0]!r}\n{USAGE}", file=sys.stderr)
            return 2
        if not slots.isdigit() or not 1 <= int(slots) <= 1024:
            print(f"agpt warm serve: error: --slots {slots!r}: a count from 1 to 1024", file=sys.stderr)
            return 2
        from agpt.warm.agent import serve

        return serve(int(slots), cmd)
    print(f"agpt warm: error: unknown command {what!r}\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
