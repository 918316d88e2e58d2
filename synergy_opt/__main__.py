"""``python -m synergy_opt`` runs the command line."""

import sys

from synergy_opt.cli import main

sys.exit(main())
