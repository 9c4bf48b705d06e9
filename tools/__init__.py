"""edgefd: node feature producers, a label sink and a device plugin for edge accelerators.

Layers, from the ground up (each imports only from those below it; checked by
tests/project/test_imports.py):

    core      errors and exit codes, host root, labels, features.d format and publisher,
              YAML schema helper, backoff, durations                   (no click, no tool)
    runtime   the one runner, the one watcher, signals, metrics + probes (no click, no tool)
    bus       sysfs attributes, bus enumeration, USB/PCI records, the accelerator catalogue
    kube      the one Kubernetes API client, its rate limit, retries and list-watch
    cli       the click options and exit-code handling every command shares
    inventory the one device source: identity (naming), presence, the resources configuration,
              the catalogue match and the selectors, snapshots     (no gRPC, no Kubernetes)
    scan      the bus scanners' engine: NFD config, derivation, capabilities, reports
    dt_labeller usb_scan pci_scan feature_sink devplugin device_keeper
              the tools; never import each other
"""

# The one place the version is written (setup.cfg reads it: `version = attr:`); the image tag,
# the chart and the manifests name the same one (tests/project/test_version.py).
__version__ = "0.1.0"
