"""`python -m edgefd.kubectl_edgefd` runs kubectl-edgefd."""

from .cli import main

main()
