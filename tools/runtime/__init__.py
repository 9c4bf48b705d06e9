"""What long-running processes share: the one runner (`runner`: components, signals, probes,
reloads, the stop order), one watcher (inotify, uevents, polling, debounce), the signal helper
the runner uses, a mounted configuration file's watch, Prometheus metrics and the health
endpoint. Imports no click and no tool."""
