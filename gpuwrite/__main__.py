import sys

from gpuwrite.cli import main

# Guarded: sweep worker processes (spawn) import the main module and must not run the CLI again.
if __name__ == "__main__":
    sys.exit(main())
