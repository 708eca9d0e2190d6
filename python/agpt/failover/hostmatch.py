"""Map the host names a log spells to the hostfile's spelling, or to nothing.

A log names a host as the launcher, the NIC or the management network knows it: `nid001234-hsn0`,
`x4102c5s2b0n0.hostmgmt2102.cm.aurora.alcf.anl.gov`, `x1000c0s0b0n0h0` (a Cray EX NIC xname), an IP address, a
Slurm hostlist `nid[001234-001236]`.  The failover loop swaps hosts by the spelling of its hostfile, and a name
that is in no line of the hostfile (a spare, a login node, the Lustre server) must never be reported, so every
match goes through one `HostMatcher` built from the hostfile and the `IP HOST` map recorded at job start.

Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from agpt import rundir
from agpt.hostlist import expand_hostlist

# Interface suffixes that name the same node on another network: `nid001234-hsn0`, `node7-ib0`.
_IFACE_SUFFIX = re.compile(r"-(?:hsn|nmn|hmn|can|chn|ib|eth|opa|mgmt)\d*$")
# A Cray EX NIC xname (`x1000c0s0b0n0h0`) names the node `x1000c0s0b0n0`.
_XNAME_NIC = re.compile(r"^(x\d+c\d+s\d+b\d+n\d+)h\d+$")
_STRIP = " \t[]()<>{}'\"`,;:!?"


def host_key(name: str) -> str:
    """The node a spelling stands for: lower case, short name, no interface suffix.

    FQDN and short name, `-hsnN` and management-domain spellings of one node all give one key.
    """
    n = name.strip(_STRIP).lower().rstrip(".")
    if not n:
        return ""
    short = n.split(".", 1)[0] if not rundir.is_ip(n) else n
    short = _IFACE_SUFFIX.sub("", short)
    m = _XNAME_NIC.match(short)
    if m:
        short = m.group(1)
    return short


def _strip_port(token: str) -> str:
    """`10.1.2.3:29500`, `[fe80::1]:29500` and `10.1.2.3<29500>` name the address without the port."""
    t = token.strip()
    if t.startswith("[") and "]" in t:
        return t[1 : t.index("]")]
    t = t.split("<", 1)[0]
    if t.count(":") == 1:
        t = t.split(":", 1)[0]
    return t


def read_hostfile(path: str | Path) -> list[str]:
    """Hosts of a hostfile (agpt.rundir.read_hostfile: one per line, `host slots=4` and `host:4` name host,
    blank lines and `#` comments ignored, names outside [A-Za-z0-9._-] refused), in file order; two spellings
    of one node (`nid001234`, `nid001234-hsn0`) count once, as first spelled."""
    return _dedup_nodes(rundir.read_hostfile(Path(path)))


def parse_hosts(lines: Iterable[str]) -> list[str]:
    """The de-duplicated host names of hostfile lines (see read_hostfile)."""
    return _dedup_nodes(rundir.parse_hostfile(lines))


def _dedup_nodes(names: Iterable[str]) -> list[str]:
    hosts: list[str] = []
    seen: set[str] = set()
    for name in names:
        key = host_key(name)
        if key and key not in seen:
            seen.add(key)
            hosts.append(name)
    return hosts


def read_ipmap(path: str | Path) -> list[tuple[str, str]]:
    """`IP HOST` pairs of an address map (hosts/ip); a line may list several names after the address."""
    text = rundir.read_text(Path(path), what="ipmap")
    pairs: list[tuple[str, str]] = []
    for raw in text.splitlines():
        fields = raw.split("#", 1)[0].split()
        if len(fields) < 2:
            continue
        ip, names = fields[0], fields[1:]
        if not rundir.is_ip(ip) and rundir.is_ip(names[0]):  # tolerate `HOST IP` as /etc/hosts would not
            ip, names = names[0], [fields[0]]
        pairs.extend((ip, n) for n in names)
    return pairs


@dataclass(kw_only=True, slots=True)
class HostMatcher:
    """Resolves any spelling of a node (or one of its addresses) to the hostfile's spelling.

    Ambiguity resolves to nothing: an address that two hosts share (all nodes on 127.0.0.1 in a test cluster)
    names no one, because a wrong swap costs a good node and a blind guess is the loop's job, not ours.
    """

    hosts: list[str]
    ipmap: list[tuple[str, str]] = field(default_factory=list)
    _exact: dict[str, str] = field(init=False, default_factory=dict)
    _by_key: dict[str, str | None] = field(init=False, default_factory=dict)
    _by_ip: dict[str, str | None] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        for h in self.hosts:
            self._exact[h] = h
            k = host_key(h)
            if k in self._by_key and self._by_key[k] != h:
                self._by_key[k] = None
            else:
                self._by_key[k] = h
        for ip, name in self.ipmap:
            host = self._name(name)
            if host is None:
                continue
            ip_n = ip.lower()
            if ip_n in self._by_ip and self._by_ip[ip_n] != host:
                self._by_ip[ip_n] = None
            else:
                self._by_ip[ip_n] = host

    def _name(self, token: str) -> str | None:
        if token in self._exact:
            return self._exact[token]
        return self._by_key.get(host_key(token))

    def match(self, token: str) -> str | None:
        """The hostfile spelling of one name or address, or None when it is not one of the job's hosts."""
        t = token.strip(" \t()<>{}'\"`,;!?").rstrip(".")
        if not t:
            return None
        if t in self._exact:
            return t
        bare = _strip_port(t)
        if rundir.is_ip(bare):
            return self._by_ip.get(bare.lower())
        return self._name(bare.strip("[]:"))

    def match_all(self, token: str) -> list[str]:
        """Hostfile spellings named by a token that may be a Slurm hostlist (`nid[001-004]`), in order, unique."""
        t = token.strip(" \t()<>{}'\"`;!?").rstrip(".,:")
        names = expand_hostlist(t) if "[" in t and not t.startswith("[") else t.split(",")
        out: list[str] = []
        for n in names:
            h = self.match(n)
            if h is not None and h not in out:
                out.append(h)
        return out
