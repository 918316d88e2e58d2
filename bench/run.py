"""Run every ``bench/bench_*.py`` in turn (``--quick`` passes through), one table each.

python bench/run.py [--quick]
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main() -> int:
    """Run the benchmark scripts; exit non-zero if any of them fails."""
    here = Path(__file__).resolve().parent
    extra = [a for a in sys.argv[1:] if a == "--quick"]
    failed = 0
    for script in sorted(here.glob("bench_*.py")):
        print(f"== {script.name} {' '.join(extra)}", flush=True)
        rc = subprocess.run([sys.executable, str(script), *extra], check=False).returncode
        failed += rc != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
