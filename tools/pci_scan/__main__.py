"""`python -m edgefd.pci_scan` and the `pci-scan` command: edgefd.core.lifetime."""

from edgefd.core import lifetime

main = lifetime.entry_point(__package__)

if __name__ == "__main__":
    main()
