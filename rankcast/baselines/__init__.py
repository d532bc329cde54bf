"""Baselines of the paper's experiments (Section 8.1), apart from the production paths.

They share the production interfaces so that one benchmark drives them all:

- :class:`IPT` and :class:`CIQ` are disseminators (the interface of
  :class:`rankcast.kinds.spatial.igpt.IGPT`): ``SkypeCore(cfg, disseminator=IPT)``;
- :class:`BruteForceCore` has the SkypeCore interface: ``Engine(cfg, core=BruteForceCore)``,
  also :func:`BruteForceEngine`;
- kmax and Skyband are re-evaluation policies of SkypeCore itself (``policy="kmax"`` /
  ``"skyband"``).
"""
from .brute import BruteForceCore, BruteForceEngine
from .ciq import CIQ
from .ipt import IPT

__all__ = ["IPT", "CIQ", "BruteForceCore", "BruteForceEngine"]
