import sys

from collbench_py.cli import main

sys.exit(main())
