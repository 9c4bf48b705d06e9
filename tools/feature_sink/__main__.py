"""`python -m edgefd.feature_sink` runs the feature-sink CLI."""

from .cli import main

main()
