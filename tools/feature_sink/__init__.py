"""feature-sink: the long-running, unprivileged consumer applying features.d labels to its Node."""
