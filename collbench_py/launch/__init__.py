"""A benchmark launch: every argv (mpirun, torchrun, srun) in `spec`; in `steps`, the steps each
host runs and what they ended as."""
