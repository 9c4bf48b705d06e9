"""`python -m tools.devplugin` runs the devplugin command."""

from .cli import main

main()
