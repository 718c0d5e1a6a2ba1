"""`python -m sluice ARGS...` runs the `sluice` binary this package installed (as the `sluice`
command does)."""
import os
import sys

from sluice import binary

if __name__ == "__main__":
    path = binary()
    os.execv(path, [path] + sys.argv[1:])
