"""pci-scan: PCI devices -> NFD-compatible labels and accelerator capability labels."""
