"""Property-based: one host-name rule (agpt.rundir.valid_host).  A name it accepts is a plain shell word that is
never an option nor more than one line; and every entry to hosts/* (the allocation's parser, init, a write of
a list, hosts/bad, preflight's HOST, the events read back) accepts exactly the names the rule accepts."""

from __future__ import annotations

import ipaddress
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from agpt import rundir, shellword
from agpt.errors import BadInput
from agpt.failover import hosts, plan
from fuzz_util import FUZZ

NAMES = st.one_of(
    st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,12}", fullmatch=True),
    st.ip_addresses().map(str),
    st.ip_addresses(v=6).map(lambda a: f"{a}%" + "eth0"),
    st.sampled_from(
        [
            "::1%$(id)",
            "::1%;reboot",
            "[::1]",
            "-n1",
            "n1;id",
            "n1 n2",
            "n1\nn2",
            "$(id)",
            "",
            "x" * 300,
            "n\u2028",
            "n1\x1b",
            "fe80::1%25eth0",
            "1.2.3.4/24",
            "::ffff:1.2.3.4",
        ]
    ),
    st.text(max_size=16),
)


@FUZZ
@given(NAMES)
def test_a_host_the_rule_accepts_is_a_plain_word_never_an_option(name: str) -> None:
    if not rundir.valid_host(name):
        return
    assert shellword.word(name, "host") == name
    assert not name.startswith("-") and 0 < len(name) <= rundir.HOST_MAX
    assert "%" not in name and not shellword.CONTROL.search(name)
    if ":" in name:
        ipaddress.ip_address(name)  # an address, in plain numeric form


def _accepts(fn: object, *args: object, **kw: object) -> bool:
    try:
        fn(*args, **kw)  # type: ignore[operator]
    except BadInput:
        return False
    return True


@FUZZ
@given(NAMES)
def test_every_entry_to_hosts_accepts_exactly_what_the_rule_accepts(name: str) -> None:
    ok = rundir.valid_host(name)
    with tempfile.TemporaryDirectory() as d:
        run = Path(d)
        assert _accepts(hosts.write_hosts, run / "active", [name]) == ok
        assert _accepts(hosts.append_bad, run / "bad", [name], jobid="j", evidence="x") == ok
        assert _accepts(rundir.check_host, name, "HOST") == ok  # preflight's HOST
        assert (plan._hosts([name]) == [name]) == ok  # an event's swapped.out read back
        one_word = name.strip() == name and name and not any(c.isspace() or c == "#" for c in name)
        if one_word and not rundir._HOST_SLOTS.match(name):  # `n2:4` names n2 (slots), by design
            assert _accepts(rundir.parse_hostfile, [name]) == ok
            assert _accepts(hosts.init_run_hosts, run, [name], spares=0, resolve_timeout=0) == ok
