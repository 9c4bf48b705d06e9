"""`python -m edgefd.dt_labeller`, for hosts where the console script is not on PATH."""

from .cli import main

main()
