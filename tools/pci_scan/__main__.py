"""`python -m tools.pci_scan`."""

from tools.pci_scan.cli import main

if __name__ == "__main__":
    main()
