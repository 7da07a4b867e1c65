"""Print the installed version of a Python distribution without importing it (importing torch
takes seconds per node): `python3 dist_version.py torch`. Exit 1 when it is not installed.

Runs on the node with its own Python (3.8 and up), the standard library only.
"""

import sys
from importlib import metadata

try:
    print(metadata.version(sys.argv[1]))
except metadata.PackageNotFoundError:
    sys.exit(f"{sys.argv[1]} is not installed for {sys.executable}")
