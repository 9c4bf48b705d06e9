"""The scan engine: NFD-style configuration, label derivation over any bus, capability labels,
explain/inventory output and the producer command. Takes the buses it combines as arguments;
never imports a tool."""
