"""`python -m seal.learning_check ...`: the same as `seal-learning-check ...`."""

import sys

from seal.learning_check.cli import main

sys.exit(main())
