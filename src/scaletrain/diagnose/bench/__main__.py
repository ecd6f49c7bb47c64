"""`python -m scaletrain.diagnose.bench`: run on every rank by a launcher."""

import sys

from scaletrain.diagnose.bench.run import main

sys.exit(main())
