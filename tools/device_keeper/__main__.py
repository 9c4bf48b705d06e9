"""`python -m edgefd.device_keeper` runs the device-keeper command."""

from .cli import main

main()
