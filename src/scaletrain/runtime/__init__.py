"""Inside each training process: which launcher, which rank, which device, which group.

Nothing is imported here: importing one module of the package must not load the others.
"""
