import sys

from flashsale.cli import main

sys.exit(main())
