"""The v1beta1 device plugin front-end of devplugin: one test module per product module."""
