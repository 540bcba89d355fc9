"""The local cluster: real Slurm on one machine, nodes as network namespaces, built by the `local` bootstrap."""
