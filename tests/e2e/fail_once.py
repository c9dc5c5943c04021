"""A stand-in for a transient fault, put in front of a stage's command by the fault tests:
fails the first time (or every time with --always), leaving a marker file to count attempts."""

import sys
from pathlib import Path

marker = Path(sys.argv[1])
attempts = int(marker.read_text()) + 1 if marker.is_file() else 1
marker.write_text(str(attempts))
if attempts == 1 or "--always" in sys.argv:
    print(f"injected fault: attempt {attempts} fails", flush=True)
    sys.exit(75)
print(f"attempt {attempts}: no fault", flush=True)
