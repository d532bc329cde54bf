"""Spark through RayDP (session, readers, vocabulary, bulk load, replay, offline evaluation)
and the workloads of the paper (datasets).

Submodules are imported on demand: :mod:`.datasets` needs no JVM, the Spark ones start one
only when a function asks for a session.
"""
__all__: list[str] = []
