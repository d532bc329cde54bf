"""The listening sockets of Ray's processes (the embedded default listens on loopback only)."""
from __future__ import annotations

import ipaddress
import os

__all__ = ["listening", "is_loopback", "ray_pids"]


def listening(pids) -> list[tuple[int, str, str, int]]:
    """(pid, name, address, port) of every listening inet socket of the processes ``pids``
    and their descendants."""
    import psutil
    procs = {}
    for pid in pids:
        try:
            p = psutil.Process(pid)
            kids = p.children(recursive=True)
        except psutil.NoSuchProcess:
            continue
        procs[p.pid] = p
        for c in kids:
            procs[c.pid] = c
    out = []
    for p in procs.values():
        try:
            for s in p.net_connections(kind="inet"):
                if s.status == psutil.CONN_LISTEN:
                    out.append((p.pid, p.name(), s.laddr.ip, s.laddr.port))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def is_loopback(ip: str) -> bool:
    """127.0.0.0/8, ::1, or an IPv4 loopback address mapped into IPv6."""
    a = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(a, "ipv4_mapped", None)
    return (mapped or a).is_loopback


def ray_pids() -> list[int]:
    """This process (a driver) and every process of the Ray node it started."""
    import ray
    node = ray._private.worker._global_node
    return [os.getpid()] + [i.process.pid for infos in node.all_processes.values() for i in infos]
