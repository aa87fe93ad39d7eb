"""``python -m hopmem.server serve ...`` / ``keys ...``: works without the main CLI."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
