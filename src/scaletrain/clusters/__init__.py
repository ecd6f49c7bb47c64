"""Cluster knowledge as data: profiles of LUMI, Puhti, Mahti, this machine, and your own.

Nothing is imported here: importing one module of the package must not load the others.
"""
