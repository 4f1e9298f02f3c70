"""`python -m workloads.evaluation`: see `workloads.evaluation.cli`."""

import sys

from workloads.evaluation.cli import main

sys.exit(main())
