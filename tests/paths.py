"""Where the tests find data the repository ships (so a fresh clone anywhere runs the whole suite)."""
from pathlib import Path

# public clembench v2.0 records, copied byte for byte (provenance in its README.md)
CLEMBENCH_SAMPLE = Path(__file__).resolve().parent / "data" / "clembench-runs-sample"
