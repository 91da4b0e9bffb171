import sys

from seedance.cli import main

sys.exit(main())
