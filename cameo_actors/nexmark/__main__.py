"""`python -m cameo_actors.nexmark [DIR]`: write every query's JSON spec (default: the
package's `specs/` folder, which tests/unit/test_nexmark.py compares with the builders)."""

from __future__ import annotations

import sys

from cameo_actors.nexmark.queries import SPECS_DIR, write_specs

if __name__ == "__main__":
    for path in write_specs(sys.argv[1] if len(sys.argv) > 1 else SPECS_DIR):
        print(path)
