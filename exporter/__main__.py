"""`python -m exporter` runs the command line."""

import sys

from exporter.cli import main

sys.exit(main())
