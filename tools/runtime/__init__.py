"""What long-running processes share: one watcher (inotify, uevents, polling, debounce), one
stop/reload signal helper, Prometheus metrics and the health endpoint. Imports no click and no
tool."""
