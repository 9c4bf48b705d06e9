"""The scan engine: NFD-style configuration (`config`), label derivation over any bus and the
capability labels from the inventory's devices (`derive`), the explain text and the JSON
inventory (`report`), what a watching scanner logs (`story`), the subscriber that publishes
every snapshot (`session`) and the producer command (`producer`, run once or by the runner).
Takes the buses it combines as arguments; never imports a tool."""
