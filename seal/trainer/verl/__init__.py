"""The verl 0.9.1 plugin: the only package of the project that imports verl.

Loaded by verl through the `verl.plugins` entry point (see plugin.py); importing
`seal.trainer.verl` itself imports nothing from verl, so the rest of the project and
its tests run where verl is not installed.
"""
