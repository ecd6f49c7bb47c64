"""`python -m scaletrain.diagnose.preflight`: run on every rank by a launcher."""

import sys

from scaletrain.diagnose.preflight.run import main

sys.exit(main())
