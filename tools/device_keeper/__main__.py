"""`python -m edgefd.device_keeper` and the `device-keeper` command: edgefd.core.lifetime."""

from edgefd.core import lifetime

main = lifetime.entry_point(__package__)

if __name__ == "__main__":
    main()
