"""The ground floor: errors and exit codes, the host root, label rules, the features.d format
and its publisher, the YAML schema helper and backoff. Imports no click and no tool."""
