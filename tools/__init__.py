"""edgefd: node feature producers, a label sink and a device plugin for edge accelerators."""
