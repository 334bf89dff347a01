"""`playpen doctor [--storage-root DIR] [--skip FEATURE ...] [--json]`: the checks of this machine as a table, a row
printed as each check ends (or JSON at the end), written to <storage_root>/doctor/<time>-local-<host>/doctor.json.
Exit 0 when nothing FAILED, 1 otherwise."""
from __future__ import annotations

import argparse
import contextlib
import platform
import socket
import sys
import time

from playpen.doctor.features import FEATURES

# the streamed table's columns, as wide as table() makes them for this machine's checks ("software", "deepspeed
# zero-2"): a name or section not known yet when the first row prints cannot widen them
SECTION_WIDTH, NAME_WIDTH = 8, 16


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--storage-root", default=None,
                        help="the storage root to check and write the report under (default: $PLAYPEN_STORAGE "
                             "or ./runs)")
    parser.add_argument("--skip", action="append", default=[], choices=FEATURES,
                        help="a feature not to try (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the JSON report instead of the table")


def main(args: argparse.Namespace) -> int:
    from playpen.doctor import DOCTOR_FILE, local_checks, output_folder
    from playpen.doctor.report import FAILED, as_json, row, streaming, table_header, table_summary
    from playpen.errors import PlaypenError
    from playpen.storage import atomic_write_text, storage_full

    start = time.perf_counter()
    rows = contextlib.nullcontext()
    if not args.json:  # each row as its check ends: the features take minutes
        print(table_header(SECTION_WIDTH, NAME_WIDTH), flush=True)
        rows = streaming(lambda check: print(row(check, SECTION_WIDTH, NAME_WIDTH), flush=True))
    with rows:
        checks = local_checks(args.storage_root, tuple(args.skip))
    meta = {"kind": "local", "host": socket.gethostname(), "platform": platform.platform(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "seconds": round(time.perf_counter() - start, 2)}
    text = as_json(checks, **meta)
    root = next((c.data.get("path") for c in checks if c.name == "storage_root" and c.status != FAILED), None)
    written, unwritten = None, "not written (the storage root is not writable)"
    if root is not None:
        from pathlib import Path

        try:
            written = atomic_write_text(output_folder(Path(root), "local") / DOCTOR_FILE, text)
        except (OSError, PlaypenError) as e:  # a full disk (the storage check above says so): the table prints
            unwritten = f"not written ({storage_full(e) or getattr(e, 'strerror', None) or e})"
    if args.json:
        print(text)
    else:
        print(table_summary(checks))
        print(f"doctor: {meta['seconds']:.1f} s; report: {written or unwritten}")
    sys.stdout.flush()
    return 1 if any(c.status == FAILED for c in checks) else 0
