"""`python -m edgefd.devplugin` runs the devplugin command."""

from .cli import main

main()
