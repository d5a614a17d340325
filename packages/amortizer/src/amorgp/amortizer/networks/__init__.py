"""The network side of the amortizer: configurations and the registry of network
classes, the networks and their layers, checkpoints (bundled and on disk), the
forward pass and the choice among candidate networks.
"""
