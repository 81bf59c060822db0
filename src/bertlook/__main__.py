import sys

from bertlook.cli import main

sys.exit(main())
