import sys

from hooked_clip1d.cli import main

sys.exit(main())
