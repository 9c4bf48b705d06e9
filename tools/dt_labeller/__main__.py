"""`python -m edgefd.dt_labeller` and the `dt-labeller` command: edgefd.core.lifetime."""

from edgefd.core import lifetime

main = lifetime.entry_point(__package__)

if __name__ == "__main__":
    main()
