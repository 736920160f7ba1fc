"""``python -m matchopt.cli``: the command line."""

import sys

from matchopt.cli import main

sys.exit(main())
