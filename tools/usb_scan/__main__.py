"""`python -m tools.usb_scan`."""

from tools.usb_scan.cli import main

if __name__ == "__main__":
    main()
