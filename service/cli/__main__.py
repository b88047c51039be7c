"""`python -m service.cli`: the `transformer` command without its script (torchrun, a checkout not installed)."""

import sys

from service.cli import main

sys.exit(main())
