"""Slurm: the nodes of a partition (sinfo, hostlists) and the run's allocation and job steps."""
