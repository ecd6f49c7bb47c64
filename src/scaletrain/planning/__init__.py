"""Planning: a resource request and a cluster profile become a Plan (no torch here).

Nothing is imported here: importing one module of the package must not load the others.
"""
