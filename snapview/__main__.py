"""``python -m snapview ...`` runs the ``snapview`` command."""

import sys

from snapview.cli import main

sys.exit(main())
