"""The version of rankcast: read by pyproject.toml (setuptools dynamic) and rankcast.__version__."""
__version__ = "0.1.0"
