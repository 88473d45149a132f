"""`python -m kvsim` runs the command line."""

import sys

from kvsim.cli import main

sys.exit(main())
