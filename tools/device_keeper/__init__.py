"""device-keeper: when a device a container was given re-enumerates (a Coral USB or an NCS2
loading its firmware), allow the new node and revoke the old one in that running container's
device cgroup, and make the container's own path name the new node. See README.md beside
this file.
"""
