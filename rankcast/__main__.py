"""``python -m rankcast``: the command line of :mod:`rankcast.cli`."""
import sys

from .cli import main

sys.exit(main())
