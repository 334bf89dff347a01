import sys

from playpen.submit.cli import main

sys.exit(main())
