"""``python -m seedance`` is the ``seedance`` command."""

import sys

from seedance.cli import main

sys.exit(main())
