"""`python -m agpt.yeet.remote`: the node side of the ssh transport (stage a received tarball into DEST).

Prints one JSON line (ok, error, files, seconds) for the head to collect; exits 0 when DEST was replaced.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from agpt import numeric
from agpt.errors import AgptError, BadInput
from agpt.yeet.extract import check_dest
from agpt.yeet.node import stage_file

CHUNK = 8 << 20


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="agpt.yeet.remote", description=__doc__)
    p.add_argument("--tarball", type=Path, required=True)
    p.add_argument("--dest", type=Path, required=True)
    p.add_argument("--host", required=True)
    p.add_argument("--sha256", required=True)
    p.add_argument("--size", type=numeric.flag("--size", lo=0, hi=1 << 60, integer=True), required=True)
    p.add_argument("--compression", default="zstd")
    p.add_argument("--check")
    p.add_argument(
        "--members",
        type=numeric.flag("--members", lo=0, hi=numeric.MAX_COUNT, integer=True),
        default=0,
        help="> 0: the head validated this digest's tarball",
    )
    try:
        a = p.parse_args(argv)
    except BadInput as e:
        p.error(str(e))
    out: dict[str, object] = {"host": a.host, "ok": False}
    try:
        check_dest(a.dest)
        rx = stage_file(
            a.tarball,
            dest=a.dest,
            compression=a.compression,
            sha256=a.sha256,
            size=a.size,
            check=a.check,
            chunk=CHUNK,
            members=a.members,
        )
        if rx.error:
            rx.stage.abort()
            out["error"] = rx.error
        else:
            rx.stage.commit()
            out.update(ok=True, files=rx.files)
        out["seconds"] = round(rx.seconds(), 3)
    except (AgptError, OSError) as exc:
        out["error"] = str(exc)
    print(json.dumps(out), flush=True)
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
