#!/opt/kg/bin/python3
"""The image's HEALTHCHECK: GET /health on the server's own port over loopback (always an
allowed Host); exit 0 when it answers 200, else 1 with the reason on one line."""

import os
import sys
import urllib.request

port = os.environ.get("KG_PORT", "8321")
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=4) as answer:
        sys.exit(0 if answer.status == 200 else 1)
except Exception as exc:  # unreachable, 503 while the store opens, a timeout
    print(f"kg-healthcheck: {exc}", file=sys.stderr)
    sys.exit(1)
