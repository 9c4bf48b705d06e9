"""`python -m edgefd.usb_scan` and the `usb-scan` command: edgefd.core.lifetime."""

from edgefd.core import lifetime

main = lifetime.entry_point(__package__)

if __name__ == "__main__":
    main()
