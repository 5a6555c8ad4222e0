"""``python -m tests.chaos``: the chaos campaign (see :mod:`tests.chaos.campaign`)."""

import sys

from tests.chaos.campaign import main

sys.exit(main())
