"""`python -m tests.fixturegen NODE.yaml DEST [--no-devicetree]`: build a fixture host root."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import build_host


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fixturegen", description=__doc__)
    ap.add_argument("node", help="node description YAML (or a name under tests/fixtures/nodes)")
    ap.add_argument("dest", type=Path, help="directory to become the host root")
    ap.add_argument("--no-devicetree", action="store_true", help="skip the devicetree part")
    args = ap.parse_args(argv)
    root = build_host(args.node, args.dest, devicetree=not args.no_devicetree)
    print(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
