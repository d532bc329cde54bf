"""Paper-style experiments (``rankcast bench ...``): JSON on stdout and in ``out/``, PNG
charts next to it.

- :mod:`.engine` - IGPT-cSkyband against the baselines in one process (paper 8.1);
- :mod:`.cluster` - the DSkype roles on Ray (paper 8.2);
- :mod:`.ingest` - the Spark path: bulk subscription load and message replay.
"""
__all__: list[str] = []
