import sys

from gpuwrite.cli import main

sys.exit(main())
