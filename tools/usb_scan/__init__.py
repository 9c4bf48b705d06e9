"""usb-scan: USB devices -> NFD-compatible labels and accelerator capability labels."""
