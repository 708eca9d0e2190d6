"""Property-based: a value never becomes code in the shell text we write.

- The one rule is spelled twice (env_quote in lib/env.sh for the job script, agpt.shellword for hook commands and
  the job config's assignments): on any text both refuse the same values, and what each prints reads back, under
  bash, as the value itself.
- Every value that reaches a generated job script (job config keys, site profile keys, paths) is generated with
  payloads that would run a command if any quoting slipped; the script either is refused (exit 2, one line) or,
  run under bash with the toolkit's libraries stubbed, creates no canary and hands the command its words intact.
- A hook command built from hosts and the run directory's path runs no canary either.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from hypothesis import event, given
from hypothesis import strategies as st

from agpt import rundir, shellword
from agpt.errors import BadInput
from agpt.failover import each
from conftest import ROOT, agpt_env
from fuzz_util import FUZZ, FUZZ_HEAVY

CANARY = "AGPT_CANARY"
# Pieces a value could smuggle a command with; {c} is the canary's path.
PAYLOADS = [
    "$(touch {c})",
    "`touch {c}`",
    ";touch {c}",
    "&& touch {c}",
    "| touch {c}",
    "\ntouch {c}\n",
    "\r\ntouch {c}",
    "' ; touch {c} ; '",
    '" ; touch {c} ; "',
    "${{IFS}}touch${{IFS}}{c}",
    "$'\\x74ouch' {c}",
    "PWD[$(touch {c})]",
    "{{a,b}}",
    "~root",
    "*",
    " a b ",
    "\\",
    "#",
    "\x1b[2J",
    "\u2028",
    "\x85",
    "-x",
    "é",
    "a",
    "{{a,b}}",
    "runs/x",
    "$HOME",
]
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
PRINTABLE = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"), blacklist_characters="\x85"),
    max_size=12,
)


def values(canary: Path, *, printable: bool = False) -> st.SearchStrategy[str]:
    """Text mixing command payloads; PRINTABLE: only those a script may hold (no control character), so the
    value is written and the script run, rather than refused."""
    pieces = [p.format(c=canary) for p in PAYLOADS]
    if printable:
        pieces = [p for p in pieces if not shellword.CONTROL.search(p)]
    return st.lists(st.one_of(st.sampled_from(pieces), PRINTABLE if printable else TEXT), min_size=1,
                    max_size=3).map("".join)  # fmt: skip


# --- the rule, spelled twice ----------------------------------------------------------------------------------
BASH_BATCH = r"""
source "$AGPT_ROOT/lib/env.sh"
while IFS= read -r -d '' v; do
  if q="$(env_quote NAME "$v" 2>/dev/null)"; then
    printf 'ok\0%s\0' "$q"
    eval "r=$q"
    printf '%s\0' "$r"
  else
    printf 'no\0\0\0'
  fi
done
"""


@FUZZ
@given(st.lists(TEXT, min_size=1, max_size=20))
def test_env_quote_and_shellword_are_one_rule(texts: list[str]) -> None:
    texts = [t for t in texts if "\x00" not in t]
    r = subprocess.run(
        ["bash", "-c", BASH_BATCH],
        input=b"".join(t.encode() + b"\0" for t in texts),
        capture_output=True,
        env={**os.environ, "AGPT_ROOT": str(ROOT), "LC_ALL": "C.UTF-8"},
        timeout=60,
    )
    fields = r.stdout.split(b"\0")
    for i, t in enumerate(texts):
        status, _quoted, back = fields[3 * i : 3 * i + 3]
        try:
            py = shellword.word(t, "NAME")
        except BadInput:
            assert status == b"no", (t, fields[3 * i : 3 * i + 3])
            continue
        assert status == b"ok", t
        assert back.decode() == t  # Bash's quoting reads back as the value
        out = subprocess.run(["bash", "-c", f"printf %s {py}"], capture_output=True, timeout=30).stdout
        assert out.decode() == t  # and so does Python's


# --- generated job scripts ------------------------------------------------------------------------------------
STUB_LIB = """
sched_job_id() { echo 1; }
sched_export_deadline() { :; }
env_site_load() { :; }
env_setup() { :; }
env_ckpt_layout() { :; }
chain_start() { :; }
chain_end() { :; }
failover_init() { :; }
_words() { for w in "$@" "$AGPT_RUN_DIR" "$X_A"; do printf '%s\\0' "$w"; done >"$WORDS"; }
failover_run() { _words "$@"; }
launch_run() { _words "$@"; }
"""


def stub_home(tmp: Path) -> Path:
    """A toolkit whose libraries only record the command's words: the job script runs every line here."""
    home = tmp / "stub"
    (home / "lib").mkdir(parents=True, exist_ok=True)
    (home / "bin").mkdir(exist_ok=True)
    for lib in ("sched", "env", "launch", "chain", "failover"):
        (home / "lib" / f"{lib}.sh").write_text(STUB_LIB if lib == "failover" else "")
    agpt = home / "bin" / "agpt"
    agpt.write_text('#!/usr/bin/env bash\n[[ "$1" == check ]] && exit 0\n_w() { :; }\n')
    agpt.chmod(0o755)
    return home


def yaml_str(v: str) -> str:
    """V as a YAML double-quoted scalar (every character spelled so that YAML reads V back)."""
    return '"' + "".join(c if c.isalnum() or c in " _-./" else f"\\U{ord(c):08x}" for c in v) + '"'


def profile_word(v: str) -> str:
    """V as a single-quoted Bash word the profile parser accepts ('\\'' for a quote)."""
    return "'" + v.replace("'", "'\\''") + "'"


@FUZZ_HEAVY
@given(st.data())
def test_no_value_that_reaches_a_job_script_runs(tmp_path_factory: object, data: st.DataObject) -> None:
    tmp = Path(tmp_path_factory.mktemp("job"))  # type: ignore[attr-defined]
    canary = tmp / CANARY
    # Mostly values a script may hold (written, then run); sometimes any text (then mostly refused, one line);
    # the job's and the site's values drawn so independently (a refused job value must not hide a site value).
    v = values(canary, printable=data.draw(st.integers(0, 3), label="job printable") > 0)
    site_v = values(canary, printable=data.draw(st.integers(0, 3), label="site printable") > 0)
    job = {
        "queue": data.draw(v),
        "account": data.draw(v),
        "filesystems": data.draw(v),
        "run_dir": data.draw(v),
        "directives": data.draw(st.lists(v, max_size=2)),
        "command": ["printf", "%s", *data.draw(st.lists(v, min_size=1, max_size=3))],
        "env": {"X_A": data.draw(v)},
    }
    lines = ["job:", "  launch: true", "  failover: false"]  # launch_run (stubbed) records the words
    for k in ("queue", "account", "filesystems", "run_dir"):
        lines.append(f"  {k}: {yaml_str(job[k])}")
    lines.append("  directives: [" + ", ".join(yaml_str(d) for d in job["directives"]) + "]")
    lines.append("  command: [" + ", ".join(yaml_str(w) for w in job["command"]) + "]")
    lines.append(f"  env: {{X_A: {yaml_str(job['env']['X_A'])}}}")
    cfg = tmp / "c.yaml"
    cfg.write_text("\n".join(lines) + "\n")
    sites = tmp / "sites"
    shutil.copytree(ROOT / "site" / "generic", sites / "s")
    prof = sites / "s" / "profile.sh"
    site_q = data.draw(site_v)
    text = prof.read_text().replace("SITE_NAME=generic", "SITE_NAME=s").replace('SITE_SCHEDULER="none"', "")
    text = "\n".join(x for x in text.splitlines() if not x.startswith(("SITE_SCHEDULER=", "SITE_QUEUE=")))
    prof.write_text(text + f"\nSITE_SCHEDULER=pbs\nSITE_QUEUE={profile_word(site_q)}\n")
    r = subprocess.run(
        [str(ROOT / "bin" / "agpt"), "jobgen", "--no-check", "--site", "s", "-o", "job.pbs", str(cfg)],
        capture_output=True,
        text=True,
        env=agpt_env({"AGPT_SITE_DIR": str(sites)}),
        cwd=tmp,
        timeout=120,
    )
    assert not canary.exists(), "jobgen itself ran a value"
    if r.returncode != 0:
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        event(f"refused: {r.stderr.strip().splitlines()[-1][:70]}")
        return
    event("generated and run")
    words = tmp / "words"
    run = subprocess.run(
        ["bash", str(tmp / "job.pbs")],
        capture_output=True,
        env={
            "PATH": os.environ["PATH"],
            "AGPT_HOME": str(stub_home(tmp)),
            "PBS_O_WORKDIR": str(tmp),
            "WORDS": str(words),
            "HOME": str(tmp),
        },
        timeout=60,
    )
    assert not canary.exists(), (tmp / "job.pbs").read_text()
    assert run.returncode == 0, run.stderr
    got = [w.decode() for w in words.read_bytes().split(b"\0")[:-1]]
    run_dir = job["run_dir"] if job["run_dir"].startswith("/") else f"{tmp}/{job['run_dir']}"
    assert got == [*job["command"], run_dir, job["env"]["X_A"]]  # every word and value as written


# --- hook commands --------------------------------------------------------------------------------------------
@FUZZ
@given(st.data())
def test_no_host_or_path_that_reaches_a_hook_command_runs(
    tmp_path_factory: object, data: st.DataObject
) -> None:
    tmp = Path(tmp_path_factory.mktemp("hook"))  # type: ignore[attr-defined]
    canary = tmp / CANARY
    host = data.draw(st.one_of(values(canary), st.sampled_from(["n1", "10.0.0.1", "::1"])))
    d = data.draw(values(canary)).replace("/", "_").replace("\x00", "")
    hostfile = tmp / d / "active"
    try:
        hostfile.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return  # not a name this file system takes
    try:
        rc, out = each.run_once([host], hostfile, "printf '<%s>' {hosts} {hostfile}", timeout=30)
    except BadInput:  # refused: a host that breaks the host-name rule, or a path that is not one line
        assert not rundir.valid_host(host) or shellword.CONTROL.search(str(hostfile))
        return
    finally:
        assert not canary.exists()
    if rc == 0:
        assert out == f"<{host}><{hostfile}>"
    outputs, failed = each.run_each([host], "printf '<%s>' {host}", timeout=30)  # host passed the rule above
    assert not canary.exists() and outputs.get(host) == f"<{host}>", (outputs, failed)
