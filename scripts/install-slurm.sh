#!/usr/bin/env bash
# Install what the tests' local Slurm cluster needs (tests/support/slurm_cluster.py): Debian's
# slurm-wlm and munge, slurmdbd and mariadb-server for the clusters that keep accounting
# (tests/support/slurm_accounting.py), iproute2/util-linux for the nodes' network namespaces,
# Lmod for the cluster's `pytorch` module (tests/support/module_stack.py), libpmix-dev + openmpi-bin for
# `srun --mpi=pmix` and `mpirun` inside jobs, and bubblewrap, squashfs-tools and squashfuse for
# the test cluster's stand-in `singularity` and its image (tests/support/container.py).
# Idempotent and quiet: does nothing when all is there. On a clean machine it needs root.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"

declare -A package_of=(
    [slurmctld]=slurm-wlm [slurmd]=slurm-wlm [sbatch]=slurm-wlm
    [munged]=munge [mungekey]=munge [slurmdbd]=slurmdbd [mariadbd]=mariadb-server
    [ip]=iproute2 [nsenter]=util-linux [unshare]=util-linux [mpirun]=openmpi-bin
    [bwrap]=bubblewrap [mksquashfs]=squashfs-tools [squashfuse]=squashfuse
)
# Packages without a command of their own: a file they install.
declare -A package_with=(
    [/usr/share/lmod/lmod/init/bash]=lmod
    # Slurm's mpi/pmix plugin opens libpmix.so, which only the -dev package links.
    [/usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so]=libpmix-dev
)
missing=()
for command in "${!package_of[@]}"; do
    command -v "$command" >/dev/null || missing+=("${package_of[$command]}")
done
for file in "${!package_with[@]}"; do
    [[ -e $file ]] || missing+=("${package_with[$file]}")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

mapfile -t packages < <(printf '%s\n' "${missing[@]}" | sort -u)
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
    echo "error: the Slurm tests need ${packages[*]}, and this script installs them only as root" \
        "with apt-get. HINT: sudo apt-get install -y slurm-wlm munge slurmdbd mariadb-server iproute2 lmod libpmix-dev openmpi-bin" \
        "bubblewrap squashfs-tools squashfuse, or leave the" \
        "Slurm tests out: bash scripts/test.sh -m 'not slurm'" >&2
    exit 2
fi
echo "installing ${packages[*]} with apt-get (first time: ~60 s)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
