"""python3 -m pg_claim_dashboard --dsn ... (see the package's docstring)."""
import os
import sys

if not __package__:  # run as a directory: python3 ops/dashboard/pg_claim_dashboard
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pg_claim_dashboard import main

sys.exit(main())
