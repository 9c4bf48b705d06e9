"""The contract between edgefd's tools.

Everything two tools must agree on lives here and nowhere else: label rules, the features.d
file format, host-root path handling, common CLI behaviour, the sysfs attribute reader, the
accelerator catalogue and the inotify binding the directory watchers share.
Tools import from here, never from each other's internals.
"""
