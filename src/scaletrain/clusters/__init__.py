"""Cluster knowledge as data: profiles of LUMI, Puhti, Mahti, this machine, and your own."""

from scaletrain.clusters.catalog import (
    ProfileError,
    load_profile,
    profile_files,
    read_profile,
    user_profile_folder,
)
from scaletrain.clusters.schema import ClusterProfile

__all__ = [
    "ClusterProfile",
    "ProfileError",
    "load_profile",
    "profile_files",
    "read_profile",
    "user_profile_folder",
]
