"""`python -m tests.alerts`: run every alert scenario and print the scenario × alert table."""

import sys

from tests.alerts.run import main

sys.exit(main())
