"""`python -m edgefd.usb_scan`, and the `usb-scan` command (setup.cfg's console script names
`main`): the process's start and end as edgefd.core.lifetime says."""

from edgefd.core import lifetime

lifetime.begin()

from .cli import main as command  # noqa: E402


def main() -> None:
    lifetime.run(command)


if __name__ == "__main__":
    main()
