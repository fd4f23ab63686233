import sys

from hooked_clip1d.cli.commands import main

sys.exit(main())
