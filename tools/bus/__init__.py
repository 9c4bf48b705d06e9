"""Reading the buses: sysfs attributes, bus enumeration, USB and PCI device records, and the
accelerator catalogue that names them. Shared by both scanners and the device plugin."""
